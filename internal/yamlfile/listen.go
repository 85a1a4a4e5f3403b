package yamlfile

import (
	"net"
	"strconv"
)

// CheckListen reports a listen address that net.Listen("tcp", ...) would refuse for its form
// (host:port or :port, a port 0 to 65535), so --check finds it before the process starts. A
// name that does not resolve is still found only when the process listens.
func CheckListen(p *Problems, addr string, path ...string) {
	if addr == "" {
		return
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		p.At(path, "must be host:port or :port (\":9464\"), got %q", addr)
		return
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		p.At(path, "must end in a port number from 0 to 65535, got %q", addr)
	}
}
