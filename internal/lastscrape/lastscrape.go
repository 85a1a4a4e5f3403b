// Package lastscrape is a prometheus registry that remembers a scrape of every collector taken
// just before the collector is unregistered. The drainer unregisters its metrics when Run
// returns; tests and the demo read the final counts after that, as a last scrape before a process
// exits would.
package lastscrape

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Registry is a prometheus.Registry whose Gather adds, for every metric family no longer
// exported, the values it had just before a collector was last unregistered.
type Registry struct {
	*prometheus.Registry

	mu   sync.Mutex
	last map[string]*dto.MetricFamily
}

// New returns an empty Registry.
func New() *Registry {
	return &Registry{Registry: prometheus.NewRegistry(), last: map[string]*dto.MetricFamily{}}
}

// Unregister scrapes the registry, keeps every family it returned, then unregisters c.
func (r *Registry) Unregister(c prometheus.Collector) bool {
	families, _ := r.Registry.Gather() // a failed gauge is left out, as in a real scrape
	r.mu.Lock()
	for _, f := range families {
		r.last[f.GetName()] = f
	}
	r.mu.Unlock()
	return r.Registry.Unregister(c)
}

// Gather returns what is registered now plus the last values of families no longer registered.
func (r *Registry) Gather() ([]*dto.MetricFamily, error) {
	families, err := r.Registry.Gather()
	live := map[string]bool{}
	for _, f := range families {
		live[f.GetName()] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, f := range r.last {
		if !live[name] {
			families = append(families, f)
		}
	}
	return families, err
}
