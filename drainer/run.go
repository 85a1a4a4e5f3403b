package drainer

import (
	"cmp"
	"slices"
)

// runs links the rows of each partition in a claim into one run (job.next, in id order: the
// partition's order) and returns the runs' first rows in claim order. Rows of an unpartitioned
// queue, and every row when a claim takes one per partition, stay runs of one.
func runs(jobs []*job) []*job {
	if len(jobs) < 2 {
		return jobs
	}
	firsts := make([]*job, 0, len(jobs))
	byKey := map[string][]*job{}
	for _, j := range jobs {
		if j.event.PartitionKey == "" {
			firsts = append(firsts, j)
			continue
		}
		if _, seen := byKey[j.event.PartitionKey]; !seen {
			firsts = append(firsts, j)
		}
		byKey[j.event.PartitionKey] = append(byKey[j.event.PartitionKey], j)
	}
	if len(firsts) == len(jobs) {
		return jobs
	}
	for i, first := range firsts {
		run := byKey[first.event.PartitionKey]
		if len(run) < 2 {
			continue
		}
		slices.SortFunc(run, func(a, b *job) int { return cmp.Compare(a.event.ID, b.event.ID) })
		for k := range len(run) - 1 {
			run[k].next = run[k+1]
		}
		run[len(run)-1].next = nil
		firsts[i] = run[0]
	}
	return firsts
}

// rest is j and the rows after it in its run.
func (j *job) rest() []*job {
	var out []*job
	for ; j != nil; j = j.next {
		out = append(out, j)
	}
	return out
}
