package gocheck

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// The bounded run in make test: modelDefaultSteps steps (about 50 s alone on the 2-core development
// machine), cut short after modelBudget when the machine is busier (make test runs other tests
// beside it). PGDRAIN_MODEL_STEPS asks for an exact number of steps, with no time limit.
const (
	modelDefaultSteps = 2000
	modelBudget       = 60 * time.Second
)

// TestModel is issue 11's model-based test. Seeded random steps do what users do to queues:
// producers of every shape (plain INSERT, enqueue, COPY, savepoints, immediate constraints,
// REPEATABLE READ, SERIALIZABLE, two queues in one transaction, overlapping producers of one key committing in
// the opposite order of their ids), claims in both modes with every outcome, claims of runs
// (claim_runs: a key's next events with its head, applied in order up to the first failure, the
// rest given back or held), extend and release,
// requeue and purge, create_queue re-runs, drop and re-create, DROP TABLE and TRUNCATE behind
// pgdrain's back, a crash (the unlogged tables emptied), two sessions racing (a claim against a
// commit or another claim, a requeue against a result), producers trying what they may not write.
// After every step the database must agree
// with a simple model kept in Go (model_state_test.go):
//
//  1. nothing is stuck: every due deliverable event (on a partitioned queue: each key's first) is
//     returned by one claim cycle;
//  2. per key, claims follow commit order, and pending rows' ids follow it too;
//  3. a stale token changes nothing (the row is identical before and after);
//  4. nothing is lost: every event is in its table as sent, pending or poisoned, with the
//     attempts, lease and backoff the model expects, and no other row is there;
//  5. outbox.repair finds nothing to repair.
//
// Claims are also held to the rules (nothing sent, poisoned, leased or backing off, nothing twice),
// and leases and backoffs to their lengths; model_checks_test.go names each check.
// Every step runs as the least-privileged role that does it in real life (docs/security.md).
// PGDRAIN_MODEL_SEED replays a run, PGDRAIN_MODEL_STEPS sets its length; with PGDRAIN_SOAK=10m
// it runs seed after seed for that long. PGDRAIN_MODEL_SKIP=kind,kind leaves step kinds (or the
// "time" or "no-repair" check) out while a known bug is being fixed; the default runs everything.
func TestModel(t *testing.T) {
	t.Parallel()
	cfg := modelConfigFromEnv(t)
	if cfg.soak == 0 {
		runModel(t, cfg, cfg.seed)
		return
	}
	deadline := time.Now().Add(cfg.soak)
	for i := uint64(0); time.Now().Before(deadline); i++ {
		seed := cfg.seed + i
		if !t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runModel(t, cfg, seed) }) {
			return
		}
	}
}

type modelConfig struct {
	seed   uint64
	steps  int
	budget time.Duration // 0: no time limit
	soak   time.Duration
	skip   map[string]bool
}

func modelConfigFromEnv(t *testing.T) modelConfig {
	cfg := modelConfig{seed: uint64(time.Now().UnixNano()), steps: modelDefaultSteps, budget: modelBudget,
		skip: map[string]bool{}}
	if v := os.Getenv("PGDRAIN_MODEL_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "PGDRAIN_MODEL_SEED")
		cfg.seed = seed
	}
	if v := os.Getenv("PGDRAIN_MODEL_STEPS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "PGDRAIN_MODEL_STEPS")
		cfg.steps, cfg.budget = n, 0
	}
	if v := os.Getenv("PGDRAIN_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "PGDRAIN_SOAK")
		cfg.soak = d
	}
	for _, k := range strings.Split(os.Getenv("PGDRAIN_MODEL_SKIP"), ",") {
		if k = strings.TrimSpace(k); k != "" {
			require.True(t, modelKnownName(k), "PGDRAIN_MODEL_SKIP: no step kind or check %q", k)
			cfg.skip[k] = true
		}
	}
	return cfg
}

// modelRun is one seeded run: the database, one connection per role, the model and the log.
type modelRun struct {
	t     *testing.T
	ctx   context.Context
	cfg   modelConfig
	seed  uint64
	rng   *rand.Rand
	db    *testdb.DB
	owner *pgxpool.Pool // superuser: hostile operations and reading the tables for the checks
	// Least privilege: two producers (for overlapping transactions), a worker for the steps and
	// one racing it, a worker for the checks' claim cycles, an operator.
	producers [2]*pgx.Conn
	worker    *pgx.Conn
	racer     *pgx.Conn
	checker   *pgx.Conn
	operator  *pgx.Conn
	model     *model

	step    int
	log     []string // one line per step, printed when the run fails
	current strings.Builder
	checks  map[string]int
	kinds   map[string]int
	began   time.Time
}

func runModel(t *testing.T, cfg modelConfig, seed uint64) {
	r := newModelRun(t, cfg, seed)
	defer r.reportOnFailure()
	kinds := modelStepKinds(cfg.skip)
	for r.step = 1; r.step <= cfg.steps && (cfg.budget == 0 || time.Since(r.began) < cfg.budget); r.step++ {
		kind := r.pick(kinds)
		r.current.Reset()
		kind.run(r)
		r.log = append(r.log, fmt.Sprintf("#%d %s:%s", r.step, kind.name, r.current.String()))
		r.current.Reset()
		r.kinds[kind.name]++
		r.checkInvariants()
	}
	r.step--
	md := r.model
	total := 0
	for _, n := range r.checks {
		total += n
	}
	t.Logf("model: seed=%d, %d steps in %s, %d invariant checks (%s), %d events produced, %d delivered, "+
		"%d poisonings, %d requeued, %d purged, %d lost to TRUNCATE/DROP on purpose; steps by kind: %v",
		seed, r.step, time.Since(r.began).Round(time.Second), total, modelCounts(r.checks), md.produced,
		md.delivered, md.poisonings, md.requeued, md.purged, md.forgotten, modelCounts(r.kinds))
}

func newModelRun(t *testing.T, cfg modelConfig, seed uint64) *modelRun {
	db := testdb.New(t)
	r := &modelRun{
		t: t, ctx: context.Background(), cfg: cfg, seed: seed,
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		db:  db, owner: db.Pool,
		checks: map[string]int{}, kinds: map[string]int{}, began: time.Now(),
	}
	t.Logf("model: seed=%d, %d steps (replay: PGDRAIN_MODEL_SEED=%d)", seed, cfg.steps, seed)
	r.model = newModel(modelQueues())
	for _, q := range r.model.queues {
		r.createSchema(q)
		r.createQueue(q)
	}
	r.producers[0] = loginAs(t, db, "pgdrain_producer")
	r.producers[1] = loginAs(t, db, "pgdrain_producer")
	r.worker = loginAs(t, db, "pgdrain_worker")
	r.racer = loginAs(t, db, "pgdrain_worker")
	r.checker = loginAs(t, db, "pgdrain_worker")
	r.operator = loginAs(t, db, "pgdrain_operator")
	return r
}

// modelQueues are the queues of a run: two partitioned ones (one in a schema of its own, so it can
// be dropped with DROP SCHEMA ... CASCADE) and an unpartitioned one.
func modelQueues() []*modelQueue {
	return []*modelQueue{
		{name: "public.model_a", schema: "public", table: "model_a", keyColumn: "resource_id",
			maxAttempts: 4, backoffMin: time.Millisecond, backoffMax: 20 * time.Millisecond, policy: "poison"},
		{name: "model_b.events", schema: "model_b", table: "events", keyColumn: "account_id",
			maxAttempts: 3, backoffMin: 5 * time.Millisecond, backoffMax: 40 * time.Millisecond, policy: "poison"},
		{name: "public.model_u", schema: "public", table: "model_u",
			maxAttempts: 3, backoffMin: 2 * time.Millisecond, backoffMax: 30 * time.Millisecond, policy: "poison"},
	}
}

// note adds a detail to the current step's line in the log.
func (r *modelRun) note(format string, args ...any) {
	fmt.Fprintf(&r.current, " "+format, args...)
}

// fail stops the run: an invariant does not hold.
func (r *modelRun) fail(invariant, format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("model: step %d broke invariant %q: %s", r.step, invariant, fmt.Sprintf(format, args...))
}

// noErr stops the run on an error nothing in the model allows.
func (r *modelRun) noErr(err error, format string, args ...any) {
	r.t.Helper()
	if err != nil {
		r.t.Fatalf("model: step %d: %s: %v", r.step, fmt.Sprintf(format, args...), err)
	}
}

// reportOnFailure prints what it takes to reproduce a failed run: the seed and every step so far.
func (r *modelRun) reportOnFailure() {
	if !r.t.Failed() {
		return
	}
	if r.current.Len() > 0 {
		r.log = append(r.log, fmt.Sprintf("#%d (failing step, so far):%s", r.step, r.current.String()))
	}
	skip := ""
	if len(r.cfg.skip) > 0 {
		skip = "PGDRAIN_MODEL_SKIP=" + strings.Join(slices.Sorted(maps.Keys(r.cfg.skip)), ",") + " "
	}
	r.t.Logf("model: FAILED at step %d of seed %d. Replay: %sPGDRAIN_MODEL_SEED=%d PGDRAIN_MODEL_STEPS=%d "+
		"go test ./gocheck -run '^TestModel$' -count=1 -v\nsteps:\n%s",
		r.step, r.seed, skip, r.seed, r.step, strings.Join(r.log, "\n"))
}

// modelCounts prints a map in a stable order.
func modelCounts(m map[string]int) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

// modelStepKind is one thing users do, and how often a run does it. Steps that empty a whole
// queue (DROP TABLE, TRUNCATE, drop_queue) are rare, so queues grow long histories between them.
type modelStepKind struct {
	name     string
	weight   int
	produces bool // a producer: less often while the backlog is large, so the run stays small
	run      func(*modelRun)
}

// modelAllStepKinds is everything a run does, by role.
func modelAllStepKinds() []modelStepKind {
	return []modelStepKind{
		// Producers (pgdrain_producer).
		{"insert", 18, true, (*modelRun).stepInsert},
		{"enqueue", 12, true, (*modelRun).stepEnqueue},
		{"transaction", 18, true, (*modelRun).stepTransaction},
		{"two-queues", 9, true, (*modelRun).stepTwoQueues},
		{"copy", 9, true, (*modelRun).stepCopy},
		{"savepoint", 9, true, (*modelRun).stepSavepoint},
		{"immediate-constraints", 9, true, (*modelRun).stepImmediateConstraints},
		{"repeatable-read", 6, true, (*modelRun).stepRepeatableRead},
		{"serializable", 6, true, (*modelRun).stepSerializable},
		{"overlapping-producers", 12, true, (*modelRun).stepOverlap},
		{"producer-refused", 3, false, (*modelRun).stepProducerRefused},
		// Workers (pgdrain_worker).
		{"claim-lease", 48, false, (*modelRun).stepClaimLease},
		{"claim-lease-old-transaction", 3, false, (*modelRun).stepClaimLeaseInOldTransaction},
		{"claim-lease-runs", 12, false, (*modelRun).stepClaimLeaseRuns},
		{"claim-lock-runs", 12, false, (*modelRun).stepClaimLockRuns},
		{"claim-lock", 30, false, (*modelRun).stepClaimLock},
		{"claim-lock-savepoint", 3, false, (*modelRun).stepClaimLockInSavepoint},
		{"settle-held", 12, false, (*modelRun).stepSettleHeld},
		{"extend-or-release", 9, false, (*modelRun).stepExtendOrRelease},
		// Two sessions at the same time.
		{"claim-racing-commit", 6, true, (*modelRun).stepClaimRacingCommit},
		{"claim-racing-claim", 6, false, (*modelRun).stepClaimRacingClaim},
		{"requeue-racing-result", 3, false, (*modelRun).stepRequeueRacingResult},
		// Operators (pgdrain_operator).
		{"requeue", 6, false, (*modelRun).stepRequeue},
		{"purge", 9, false, (*modelRun).stepPurge},
		{"stats", 3, false, (*modelRun).stepStats},
		// The owner: settings, and what happens to tables behind pgdrain's back.
		{"create-queue-again", 6, false, (*modelRun).stepCreateQueueAgain},
		{"drop-and-create", 1, false, (*modelRun).stepDropAndCreate},
		{"drop-table", 1, false, (*modelRun).stepDropTable},
		{"truncate", 1, false, (*modelRun).stepTruncate},
		{"crash", 6, false, (*modelRun).stepCrash},
		{"wait", 12, false, (*modelRun).stepWait},
	}
}

// modelStepKinds returns the step kinds of a run, without those PGDRAIN_MODEL_SKIP names.
func modelStepKinds(skip map[string]bool) []modelStepKind {
	var kinds []modelStepKind
	for _, k := range modelAllStepKinds() {
		if !skip[k.name] {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

// modelKnownName says whether PGDRAIN_MODEL_SKIP may name it: a step kind, or the "time" or
// "no-repair" check.
func modelKnownName(name string) bool {
	for _, k := range modelAllStepKinds() {
		if k.name == name {
			return true
		}
	}
	return name == "time" || name == "no-repair"
}

// modelBacklogLimit is the number of pending events above which producers slow down.
const modelBacklogLimit = 120

// pick chooses the next step kind by weight.
func (r *modelRun) pick(kinds []modelStepKind) modelStepKind {
	backlog := 0
	for _, e := range r.model.events {
		if e.deliverable() {
			backlog++
		}
	}
	weight := func(k modelStepKind) int {
		if k.produces && backlog > modelBacklogLimit {
			return k.weight / 6
		}
		return k.weight
	}
	total := 0
	for _, k := range kinds {
		total += weight(k)
	}
	x := r.rng.IntN(total)
	for _, k := range kinds {
		if x -= weight(k); x < 0 {
			return k
		}
	}
	return kinds[len(kinds)-1]
}
