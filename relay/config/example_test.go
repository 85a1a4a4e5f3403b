package config_test

import (
	"fmt"
	"os"

	"github.com/pgdrain/pgdrain/relay/config"
)

// A file with mistakes: every one is reported with its line and field.
func ExampleParse() {
	_, err := config.Parse("relay.yaml", []byte(`queues:
  - queue: public.orders
    claim_mode: fast
    sink:
      kafka: {brokers: [kafka:9092]}
`), os.LookupEnv)
	fmt.Println(err)
	// Output:
	// relay.yaml:3: queues[0].claim_mode must be lease or lock, got "fast"
	// relay.yaml:5: queues[0].sink.kafka.topic must be set, or topic_field to take each event's topic from its payload
}
