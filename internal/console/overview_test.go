package console

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// fillHistory gives every queue the sampler knows 15 minutes of samples at the default refresh (5s:
// 180 of them), each with the queue's last figures and a varying number of rows delivered, as a
// console that has run for 15 minutes has. The overview's sparklines are drawn from them.
func fillHistory(s *sampler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for name, sr := range s.series {
		if len(sr.samples) == 0 {
			continue
		}
		last := sr.samples[len(sr.samples)-1]
		samples := make([]sample, 180)
		var inserted int64
		for i := range samples {
			inserted += int64((i*7+len(name))%13) * 3
			samples[i] = sample{at: now.Add(-time.Duration(len(samples)-1-i) * DefaultRefresh), stats: last.stats, inserted: inserted}
		}
		sr.samples = samples
	}
}

// The overview is fetched every --refresh by every open tab: its size follows the page it shows,
// not the number of queues. At 2,000 queues with 15 minutes of history it was about 5 MB (63% of
// it sparkline points); it now lists overviewPageSize queues at a time, each sparkline at most
// overviewSparkPoints points, and still names every queue that needs attention, wherever it is.
func TestOverview_SizeFollowsThePageNotTheNumberOfQueues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, `
		SELECT outbox.create_queue(pg_catalog.format('public.q%s', pg_catalog.lpad(g::text, 4, '0'))) FROM generate_series(1, 2000) g;
		SELECT outbox.enqueue('public.q1500', 'signup', '{}');
		UPDATE public.q1500 SET attempt_count = 10;`)
	require.NoError(t, err)
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := New(Config{Reader: pool, ReadOnly: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	s.Sample(ctx)
	fillHistory(s.sampler)

	get := func(path string, fragment bool) string {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1"+path, nil)
		if fragment {
			req.Header.Set("X-Pgdrain-Fragment", "1")
		}
		resp := serve(s, req)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
		return string(body)
	}
	rows := regexp.MustCompile(`<tr data-queue="([^"]+)"`)
	points := regexp.MustCompile(`<polyline points="([^"]*)"`)

	// What live.js fetches every refresh, and the whole page.
	const bound = 256 << 10
	fragment, page := get("/", true), get("/", false)
	t.Logf("overview at 2,000 queues: %d bytes (fragment), %d bytes (page)", len(fragment), len(page))
	require.Less(t, len(fragment), bound, "the overview's fragment at 2,000 queues")
	require.Less(t, len(page), bound, "the overview at 2,000 queues")
	shown := rows.FindAllStringSubmatch(page, -1)
	require.Len(t, shown, 100, "a page of the overview")
	require.Equal(t, "public.q0001", shown[0][1])
	for _, m := range points.FindAllStringSubmatch(page, -1) {
		require.LessOrEqual(t, len(strings.Fields(m[1])), 60, "points of one sparkline")
	}
	require.Len(t, points.FindAllString(page, -1), 100, "every queue shown has its sparkline")
	require.Contains(t, page, "Queues 1–100 of 2000")

	// The queue that needs attention is named on the first page although its row is on the 15th.
	require.Contains(t, page, "1 queue needs attention: public.q1500")
	require.NotContains(t, page, `data-queue="public.q1500"`)
	page = get("/?page=15", false)
	require.Contains(t, page, `data-queue="public.q1500"`)
	require.Contains(t, page, "Queues 1401–1500 of 2000")
	page = get("/?attention=1", false)
	shown = rows.FindAllStringSubmatch(page, -1)
	require.Len(t, shown, 1, "only the queues that need attention")
	require.Equal(t, "public.q1500", shown[0][1])
	page = get("/?q="+url.QueryEscape("Q1"), false)
	require.Len(t, rows.FindAllString(page, -1), 100, "q1000-q1999: the first page of 1000")
	require.Contains(t, page, "Queues 1–100 of 1000 matching")
	page = get("/?q=q1&page=10", false)
	require.Contains(t, page, `data-queue="public.q1999"`)
	page = get("/?q=q199", false)
	require.Len(t, rows.FindAllString(page, -1), 10)
	page = get("/?page=999", false)
	require.Contains(t, page, "Queues 1901–2000 of 2000", "a page past the end shows the last")
}
