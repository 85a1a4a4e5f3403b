package gocheck

import (
	"errors"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// scripts/ensure-deps.sh (make test, make demo) installs only what is missing and never upgrades
// an installed package: it once ran `apt-get install` for its whole list when one tool was missing,
// which upgraded postgresql-15 under running clusters (issue 30 item 6). These tests run the real
// script on a machine made of fakes: a PATH holding only the tools a case has, dpkg-query answering
// from a list of installed packages, apt-get recording how it was called (and, asked to install a
// package, putting its tool on the PATH), id saying root or not. No test database is needed.

// edInstalled is a Debian machine with PostgreSQL 15 and every other dependency installed.
var edInstalled = map[string]string{
	"postgresql-15":                          "15.18-0+deb12u1",
	"postgresql-client-15":                   "15.18-0+deb12u1",
	"postgresql-15-pgtap":                    "1.2.0-3",
	"libtap-parser-sourcehandler-pgtap-perl": "3.36-1",
	"python3-psycopg2":                       "2.9.5-1+b1",
	"pgbouncer":                              "1.18.0-1",
	"chromium":                               "120.0.6099.224-1~deb12u1",
	"gdb":                                    "13.1-3",
}

// edTools: the tool each package puts on the PATH.
var edTools = map[string]string{
	"postgresql-client-15":                   "psql",
	"libtap-parser-sourcehandler-pgtap-perl": "pg_prove",
	"pgbouncer":                              "pgbouncer",
	"chromium":                               "chromium",
	"gdb":                                    "gdb",
}

type edMachine struct {
	root, bin string
	env       []string
	aptLog    string
}

// edNew builds the fake machine: every package of installed is installed (dpkg-query says so),
// and its tool is on the PATH unless it is listed in hidden (installed, not found) or the package
// is not installed. debian=false leaves apt-get and dpkg-query out.
func edNew(t *testing.T, installed map[string]string, debian, root bool, hidden ...string) *edMachine {
	t.Helper()
	m := &edMachine{root: t.TempDir()}
	m.bin = filepath.Join(m.root, "bin")
	m.aptLog = filepath.Join(m.root, "apt.log")
	pgbin := filepath.Join(m.root, "usr/lib/postgresql/15/bin")
	ext := filepath.Join(m.root, "usr/share/postgresql/15/extension")
	for _, d := range []string{m.bin, pgbin, ext} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	exe := func(path, body string) {
		require.NoError(t, os.WriteFile(path, []byte("#!/bin/bash\n"+body), 0o755))
	}
	if _, ok := installed["postgresql-15"]; ok {
		exe(filepath.Join(pgbin, "initdb"), "exit 0\n")
	}
	if _, ok := installed["postgresql-15-pgtap"]; ok {
		require.NoError(t, os.WriteFile(filepath.Join(ext, "pgtap.control"), nil, 0o644))
	}
	// python3 on the PATH imports psycopg2 when python3-psycopg2 is installed (the script tries
	// /usr/bin/python3 first: where that has psycopg2, the case has it anyway).
	if _, ok := installed["python3-psycopg2"]; ok {
		exe(filepath.Join(m.bin, "python3"), "exit 0\n")
	}
	for pkg, tool := range edTools {
		if _, ok := installed[pkg]; ok && !edContains(hidden, tool) {
			exe(filepath.Join(m.bin, tool), "exit 0\n")
		}
	}
	uid := "1000"
	if root {
		uid = "0"
	}
	exe(filepath.Join(m.bin, "id"), "echo "+uid+"\n")
	if debian {
		var list strings.Builder
		for pkg, v := range installed {
			list.WriteString(pkg + " " + v + "\n")
		}
		require.NoError(t, os.WriteFile(filepath.Join(m.root, "installed"), []byte(list.String()), 0o644))
		var tools strings.Builder
		for pkg, tool := range edTools {
			tools.WriteString(pkg + " " + tool + "\n")
		}
		require.NoError(t, os.WriteFile(filepath.Join(m.root, "tools"), []byte(tools.String()), 0o644))
		exe(filepath.Join(m.bin, "dpkg-query"), `pkg=${@: -1}
while read -r p v; do [ "$p" = "$pkg" ] && { printf 'ii '; exit 0; }; done <"$ED_ROOT/installed"
echo "dpkg-query: no packages found matching $pkg" >&2; exit 1
`)
		// apt-get: -s prints an Inst line per package named (and $ED_ROOT/sim-extra, the
		// dependencies a case wants apt to touch); install puts each package's tool on the PATH.
		exe(filepath.Join(m.bin, "apt-get"), `echo "$*" >>"$ED_ROOT/apt.log"
sim=""; pkgs=()
for a in "$@"; do case "$a" in -s) sim=1 ;; -*|install|update) ;; *) pkgs+=("$a") ;; esac; done
if [ -n "$sim" ]; then
  for p in "${pkgs[@]}"; do echo "Inst $p (1.0 Debian:12/stable [all])"; done
  [ -f "$ED_ROOT/sim-extra" ] && while IFS= read -r l; do echo "$l"; done <"$ED_ROOT/sim-extra"
  exit 0
fi
for p in "${pkgs[@]}"; do
  while read -r q tool; do
    [ "$q" = "$p" ] && { echo 'exit 0' >"$ED_ROOT/bin/$tool"; /bin/chmod +x "$ED_ROOT/bin/$tool"; }
  done <"$ED_ROOT/tools"
done
exit 0
`)
	}
	m.env = []string{"PATH=" + m.bin, "ED_ROOT=" + m.root, "PG_BINDIR=" + pgbin, "HOME=" + m.root}
	return m
}

func edContains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// run runs scripts/ensure-deps.sh with args on the machine; it returns the output and exit code.
func (m *edMachine) run(t *testing.T, extraEnv []string, args ...string) (string, int) {
	t.Helper()
	script, err := filepath.Abs("../scripts/ensure-deps.sh")
	require.NoError(t, err)
	cmd := osexec.Command("/bin/bash", append([]string{script}, args...)...)
	cmd.Env = append(append([]string{}, m.env...), extraEnv...)
	out, err := cmd.CombinedOutput()
	code := 0
	var exit *osexec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return string(out), code
}

// aptCalls lists how apt-get was called, one call per element.
func (m *edMachine) aptCalls(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(m.aptLog)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func edWithout(m map[string]string, pkg string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if k != pkg {
			out[k] = v
		}
	}
	return out
}

// The incident's machine: PostgreSQL 15 installed (a cluster may be running on it), one tool's
// package missing. Only that package is planned and installed, with --no-upgrade, and the script
// says so before it does.
func TestEnsureDeps_InstallsOnlyTheMissingPackage(t *testing.T) {
	t.Parallel()
	const pkg = "libtap-parser-sourcehandler-pgtap-perl"
	m := edNew(t, edWithout(edInstalled, pkg), true, true)

	out, code := m.run(t, nil, "--server")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "ensure-deps: missing: pg_prove\n")
	require.Contains(t, out, "ensure-deps: installing: "+pkg+"\n")
	require.Equal(t, []string{
		"update -qq",
		"-s install --no-install-recommends --no-upgrade " + pkg,
		"install -y -qq --no-install-recommends --no-upgrade " + pkg,
	}, m.aptCalls(t))

	// Run again: nothing is missing, apt-get is not called.
	out, code = m.run(t, nil, "--server")
	require.Equal(t, 0, code, out)
	require.Empty(t, out)
	require.Len(t, m.aptCalls(t), 3)
}

// --dry-run (or ENSURE_DEPS_DRY_RUN=1) prints the plan and changes nothing: apt-get only simulates.
func TestEnsureDeps_DryRunPrintsThePlan(t *testing.T) {
	t.Parallel()
	const pkg = "chromium"
	for _, how := range []struct {
		args []string
		env  []string
	}{{args: []string{"--server", "--dry-run"}}, {args: []string{"--server"}, env: []string{"ENSURE_DEPS_DRY_RUN=1"}}} {
		m := edNew(t, edWithout(edInstalled, pkg), true, true)
		out, code := m.run(t, how.env, how.args...)
		require.Equal(t, 0, code, out)
		t.Logf("ensure-deps %s %s:\n%s", strings.Join(how.env, " "), strings.Join(how.args, " "), out)
		require.Contains(t, out, "ensure-deps: would install: "+pkg+"\n")
		require.Contains(t, out, "ensure-deps: would run: apt-get install -y -qq --no-install-recommends --no-upgrade "+pkg+"\n")
		require.Equal(t, []string{"-s install --no-install-recommends --no-upgrade " + pkg}, m.aptCalls(t))
		_, err := os.Stat(filepath.Join(m.bin, "chromium"))
		require.ErrorIs(t, err, os.ErrNotExist, "a dry run installs nothing")
	}

	m := edNew(t, edInstalled, true, true)
	out, code := m.run(t, nil, "--server", "--dry-run")
	require.Equal(t, 0, code)
	require.Equal(t, "ensure-deps: nothing is missing; would install nothing\n", out)
	require.Empty(t, m.aptCalls(t))
}

// If installing the missing package would make apt upgrade (or remove) an installed one, as a
// dependency, the script installs nothing and names what apt would have changed. (apt is told to
// want the upgrade here; which package asks for it does not matter to the script.)
func TestEnsureDeps_RefusesToUpgradeAnInstalledPackage(t *testing.T) {
	t.Parallel()
	const pkg = "libtap-parser-sourcehandler-pgtap-perl"
	m := edNew(t, edWithout(edInstalled, pkg), true, true)
	require.NoError(t, os.WriteFile(filepath.Join(m.root, "sim-extra"),
		[]byte("Inst postgresql-15 [15.18-0+deb12u1] (15.20-0+deb12u1 Debian:12/stable [amd64])\n"), 0o644))

	out, code := m.run(t, nil, "--server", "--dry-run")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "ensure-deps: would install: "+pkg+"\n")
	require.Contains(t, out, "would refuse")
	require.Contains(t, out, "postgresql-15 15.18-0+deb12u1 -> 15.20-0+deb12u1")

	out, code = m.run(t, nil, "--server")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "not installing "+pkg+": apt would upgrade or remove installed packages")
	require.Contains(t, out, "  postgresql-15 15.18-0+deb12u1 -> 15.20-0+deb12u1\n")
	for _, call := range m.aptCalls(t) {
		require.False(t, strings.HasPrefix(call, "install "), "apt-get install ran: %q", call)
	}
}

// A tool that is missing although dpkg says its package is installed (not on the PATH, say) is not
// "fixed" by installing that package again; the others are installed.
func TestEnsureDeps_LeavesInstalledPackagesAlone(t *testing.T) {
	t.Parallel()
	m := edNew(t, edWithout(edInstalled, "chromium"), true, true, "psql")
	out, code := m.run(t, nil, "--server")
	require.Equal(t, 2, code, out) // psql is still not found afterwards
	require.Contains(t, out, "ensure-deps: missing: psql chromium\n")
	require.Contains(t, out, "installed but not found (PATH?), left alone: postgresql-client-15\n")
	require.Contains(t, out, "ensure-deps: installing: chromium\n")
	require.Contains(t, out, "still missing after apt-get install: psql")
	require.Contains(t, m.aptCalls(t), "install -y -qq --no-install-recommends --no-upgrade chromium")
}

// Without root, or without apt and dpkg, it says exactly what to install (the missing packages
// only) and exits 2.
func TestEnsureDeps_SaysWhatToInstallWhereItCannot(t *testing.T) {
	t.Parallel()
	missing := edWithout(edWithout(edInstalled, "chromium"), "libtap-parser-sourcehandler-pgtap-perl")

	m := edNew(t, missing, true, false)
	out, code := m.run(t, nil, "--server")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "sudo apt-get install --no-install-recommends --no-upgrade libtap-parser-sourcehandler-pgtap-perl chromium\n")
	require.Empty(t, m.aptCalls(t))

	m = edNew(t, missing, false, true)
	out, code = m.run(t, nil, "--server")
	require.Equal(t, 2, code, out)
	t.Logf("ensure-deps without apt:\n%s", out)
	require.Contains(t, out, "ensure-deps: missing: pg_prove chromium.")
	require.Contains(t, out, "sudo apt-get install --no-upgrade --no-install-recommends libtap-parser-sourcehandler-pgtap-perl chromium\n")
	require.Contains(t, out, "pg_prove: cpan TAP::Parser::SourceHandler::pgTAP\n")
	require.Contains(t, out, "chromium: brew install --cask chromium\n")
	require.NotContains(t, out, "postgresql@15")
}
