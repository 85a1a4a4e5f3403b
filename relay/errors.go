package relay

import "strings"

// splitLines turns a joined error (errors.Join) into its lines.
func splitLines(err error) []string {
	if err == nil {
		return nil
	}
	return strings.Split(err.Error(), "\n")
}
