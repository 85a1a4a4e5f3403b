package guard

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// describe is the crashed function of these tests: what the guarded call came to, as text.
func describe(c Crash) string {
	if c.Goexit {
		return "goexit"
	}
	return fmt.Sprintf("panic: %v", c.Panic)
}

func TestRun_ReturnsWhatTheFunctionReturned(t *testing.T) {
	t.Parallel()
	crashed := false
	got := Run(func() string { return "sent" }, func(Crash) string { crashed = true; return "crashed" })
	require.Equal(t, "sent", got)
	require.False(t, crashed, "crashed runs only for a panic or Goexit")
}

func TestRun_APanicBecomesCrashedsValue(t *testing.T) {
	t.Parallel()
	var crash Crash
	got := Run(func() string {
		var m map[string]int
		m["boom"]++ // a real runtime panic
		return "unreachable"
	}, func(c Crash) string { crash = c; return describe(c) })
	require.Equal(t, "panic: assignment to entry in nil map", got)
	require.False(t, crash.Goexit)
	var rerr runtime.Error
	require.ErrorAs(t, crash.Panic.(error), &rerr)
	require.Contains(t, string(crash.Stack), "TestRun_APanicBecomesCrashedsValue", "the stack shows where it panicked")
}

func TestRun_APanicInTheErrorsOwnMethodsIsCaughtWhenReadOnTheCallsGoroutine(t *testing.T) {
	t.Parallel()
	var typedNil *textError // a non-nil error whose Error dereferences nil
	got := Run(func() string {
		var err error = typedNil
		return err.Error()
	}, describe)
	require.Equal(t, "panic: runtime error: invalid memory address or nil pointer dereference", got)
}

type textError struct{ text string }

func (e *textError) Error() string { return e.text }

func TestRun_GoexitBecomesCrashedsValueAndEndsOnlyTheCallsGoroutine(t *testing.T) {
	t.Parallel()
	var crash Crash
	got := Run(func() string {
		runtime.Goexit() // t.FailNow in a test's callback
		return "unreachable"
	}, func(c Crash) string { crash = c; return describe(c) })
	require.Equal(t, "goexit", got, "the caller's goroutine goes on")
	require.True(t, crash.Goexit)
	require.Nil(t, crash.Panic)
	require.NotEmpty(t, crash.Stack)
}

func TestRun_APanicWithNilIsAPanicNotGoexit(t *testing.T) {
	t.Parallel()
	got := Run(func() string { panic(nil) }, func(c Crash) string {
		var pn *runtime.PanicNilError
		if !c.Goexit && errors.As(c.Panic.(error), &pn) {
			return "panic(nil)"
		}
		return describe(c)
	})
	require.Equal(t, "panic(nil)", got)
}

func TestRunUntil_ACallEndingBeforeItsDeadlineIsNotAbandoned(t *testing.T) {
	t.Parallel()
	abandoned, late := false, false
	got, ok := RunUntil(func() int { return 42 }, func(Crash) int { return -1 }, Deadline[int]{
		At:        time.Now().Add(time.Minute),
		OnAbandon: func() { abandoned = true },
		OnLate:    func(int) { late = true },
	})
	require.True(t, ok)
	require.Equal(t, 42, got)
	require.False(t, abandoned)
	require.False(t, late)
}

func TestRunUntil_APanicBeforeTheDeadlineIsCrashedsValue(t *testing.T) {
	t.Parallel()
	got, ok := RunUntil(func() string { panic("notifier bug") }, describe, Deadline[string]{At: time.Now().Add(time.Minute)})
	require.True(t, ok)
	require.Equal(t, "panic: notifier bug", got)
}

// A call still running at its deadline is abandoned: RunUntil returns at the deadline without its
// value, OnAbandon runs before RunUntil returns, and OnLate gets the value once the call ends,
// never before OnAbandon has returned.
func TestRunUntil_ACallStillRunningAtItsDeadlineIsAbandonedAndReportsLate(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var mu sync.Mutex
	var events []string
	record := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, s)
	}
	lateValue := make(chan string, 1)
	start := time.Now()
	got, ok := RunUntil(func() string {
		<-release // ignores any deadline
		return "delivered late"
	}, describe, Deadline[string]{
		At: start.Add(200 * time.Millisecond),
		OnAbandon: func() {
			close(release)                    // the call may end now ...
			time.Sleep(50 * time.Millisecond) // ... but OnLate waits for OnAbandon
			record("abandoned")
		},
		OnLate: func(v string) {
			record("late")
			lateValue <- v
		},
	})
	elapsed := time.Since(start)
	require.False(t, ok)
	require.Empty(t, got, "an abandoned call's value is the zero value")
	require.GreaterOrEqual(t, elapsed, 200*time.Millisecond, "waited until the deadline")
	require.Less(t, elapsed, 2*time.Second, "and not for the call")
	select {
	case v := <-lateValue:
		require.Equal(t, "delivered late", v)
	case <-time.After(10 * time.Second):
		t.Fatal("OnLate never got the abandoned call's value")
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"abandoned", "late"}, events)
}

func TestRunUntil_AnAbandonedCallThatPanicsOrCallsGoexitReportsCrashedsValueLate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		end  func()
		want string
	}{
		{"panic", func() { panic("late boom") }, "panic: late boom"},
		{"goexit", runtime.Goexit, "goexit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			late := make(chan string, 1)
			_, ok := RunUntil(func() string {
				<-release
				c.end()
				return "unreachable"
			}, describe, Deadline[string]{
				At:     time.Now().Add(50 * time.Millisecond),
				OnLate: func(v string) { late <- v },
			})
			require.False(t, ok)
			close(release)
			select {
			case v := <-late:
				require.Equal(t, c.want, v)
			case <-time.After(10 * time.Second):
				t.Fatal("OnLate never ran")
			}
		})
	}
}

func TestRunUntil_ADeadlineAlreadyPastAbandonsAHangingCallAtOnce(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	start := time.Now()
	_, ok := RunUntil(func() bool { <-release; return true }, func(Crash) bool { return false },
		Deadline[bool]{At: start.Add(-time.Second)})
	require.False(t, ok)
	require.Less(t, time.Since(start), time.Second)
}

func TestRun_ManyCallsAtOnce(t *testing.T) {
	t.Parallel()
	var wg sync.WaitGroup
	results := make([]string, 64)
	for i := range results {
		wg.Go(func() {
			results[i] = Run(func() string {
				if i%2 == 1 {
					panic(i)
				}
				return "ok"
			}, describe)
		})
	}
	wg.Wait()
	for i, r := range results {
		if i%2 == 1 {
			require.Equal(t, fmt.Sprintf("panic: %d", i), r)
		} else {
			require.Equal(t, "ok", r)
		}
	}
}
