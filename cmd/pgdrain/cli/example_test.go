package cli_test

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/pgdrain/pgdrain/cmd/pgdrain/cli"
)

// Run returns the exit code instead of exiting, so scripts and tests can act on it: here a usage
// error (no queue named) is refused before any database is contacted.
func ExampleRun() {
	code := cli.Run(context.Background(), []string{"--dsn", "postgres://localhost/app", "stats"}, os.Stdout, io.Discard)
	fmt.Println("exit code:", code, code == cli.ExitUsage)
	// Output: exit code: 2 true
}
