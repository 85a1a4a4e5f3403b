package config_test

import (
	"fmt"
	"os"

	"github.com/pgdrain/pgdrain/escalation/config"
)

// A file with mistakes: every one is reported with its line and its key in the file.
func ExampleParse() {
	_, err := config.Parse("escalate.yaml", []byte(`engine:
  lease: 48h
channels:
  pager:
    webhook: {url: "https://pager.example.com/hook"}
`), os.LookupEnv)
	fmt.Println(err)
	// Output:
	// escalate.yaml:2: engine.lease must be between 1ms and 24h0m0s, got 48h0m0s
	// escalate.yaml:5: channels.pager.webhook.secrets must list at least one signing secret (whsec_<base64>)
}
