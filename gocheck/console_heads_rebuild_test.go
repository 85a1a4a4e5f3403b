package gocheck

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/console"
)

// crashHeads does to public.events what crash recovery, a standby's promotion or a restore without
// the unlogged tables' data does: its partition heads are gone, and claims must rebuild them.
func crashHeads(t *testing.T, b *consoleBundle) {
	t.Helper()
	forgetHeadsAsACrashDoes(t, b.db.Pool)
}

// partDoneThrough notes that a rebuild part of public.events' heads has done the keys through key.
func partDoneThrough(t *testing.T, b *consoleBundle, key string) {
	t.Helper()
	exec(t, b.db.Pool, `
		INSERT INTO outbox.partition_heads_restored (queue_id, after_key)
		SELECT q.queue_id, $1 FROM outbox.queues q WHERE q.queue = 'public.events'`, key)
}

// queuePage samples again and returns public.events' page, as the console's reader sees it.
func queuePage(t *testing.T, c *consoleClient) string {
	t.Helper()
	c.srv.Sample(context.Background())
	code, page := c.get("/queues/public.events")
	require.Equal(t, http.StatusOK, code, page)
	return page
}

// After a crash the queue page says that claims rebuild the partition heads and how far they are,
// so that an operator knows why keys wait and that the drainers must run; once a claim has rebuilt
// the last part it says nothing of it.
func TestConsole_QueuePageSaysTheHeadsAreBeingRebuilt(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	c := startConsole(t, console.Config{Reader: b.reader, ReadOnly: true}, &syncBuffer{})
	require.NotContains(t, queuePage(t, c), "being rebuilt")

	crashHeads(t, b)
	page := queuePage(t, c)
	require.Contains(t, page, `<li class="rebuilding">its partition heads are being rebuilt after a crash, a promotion or a restore `+
		`(no part done yet): keys no part has reached wait for their part. Each claim rebuilds one part, so its drainers must be running.</li>`)
	require.Contains(t, page, "this list has only the keys the rebuild has reached", "the wedged list is read from the heads")

	partDoneThrough(t, b, "acct-1")
	require.Contains(t, queuePage(t, c), `(done through key &#34;acct-1&#34;): keys no part has reached wait for their part.`)

	claimUntilHeadsBuilt(t, b.db.Pool)
	page = queuePage(t, c)
	require.NotContains(t, page, "being rebuilt")
	require.NotContains(t, page, "the rebuild has reached")
}

// The overview names a queue whose heads are being rebuilt among those that need attention, and its
// row says so.
func TestConsole_OverviewNamesAQueueWhoseHeadsAreBeingRebuilt(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	exec(t, b.db.Pool, `
		SELECT outbox.create_queue('public.calm', 'account_id');
		SELECT outbox.enqueue('public.calm', 'signup', '{}', 'acct-' || g) FROM generate_series(1, 3) g;`)
	c := startConsole(t, console.Config{Reader: b.reader, ReadOnly: true}, &syncBuffer{})
	crashHeads(t, b) // every queue's heads: public.events' and public.calm's
	c.srv.Sample(context.Background())
	code, page := c.get("/")
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, "2 queues need attention: public.calm, public.events")
	calm := regexp.MustCompile(`(?s)<tr data-queue="public.calm"[^>]*>.*?</tr>`).FindString(page)
	require.Contains(t, calm, `class="problem"`)
	require.Contains(t, calm, `<li class="rebuilding">its partition heads are being rebuilt`)
}

// The last key a rebuild part has done is data: shown quoted as text, shortened like every key,
// never as markup, its line breaks and control characters not passed to the page.
func TestConsole_TheKeyARebuildHasReachedIsShownAsText(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	c := startConsole(t, console.Config{Reader: b.reader, ReadOnly: true}, &syncBuffer{})
	crashHeads(t, b)
	partDoneThrough(t, b, "acct-0\"</li><img src=x onerror=alert(2)>\n\x01")
	page := queuePage(t, c)
	require.Contains(t, page, `(done through key &#34;acct-0&#34;&lt;/li&gt;&lt;img src=x onerror=alert(2)&gt; `+"\ufffd"+`&#34;)`)
	require.NotContains(t, page, "<img src=x")

	exec(t, b.db.Pool, `UPDATE outbox.partition_heads_restored SET after_key = repeat('k', 500)`)
	require.Contains(t, queuePage(t, c), `(done through key &#34;`+strings.Repeat("k", 80)+`… (500 characters)&#34;)`)
}

// Against a schema before migration 00051 (no outbox.heads_rebuild) the console says nothing of
// the heads: no error, no flag.
func TestConsole_SchemaWithoutHeadsRebuildSaysNothingOfTheHeads(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	exec(t, b.db.Pool, `DROP FUNCTION outbox.heads_rebuild(text)`)
	c := startConsole(t, console.Config{Reader: b.reader, ReadOnly: true}, &syncBuffer{})
	crashHeads(t, b)
	page := queuePage(t, c)
	require.NotContains(t, page, "being rebuilt")
	require.NotContains(t, page, "heads_rebuild")
	require.NotContains(t, page, `class="error"`)
}

// On a hot standby the unlogged tables behind outbox.heads_rebuild can not be read (0A000): the
// console, which may read a standby, can not know and says nothing; any other failure to read it is
// said, like that of the wedged partitions.
func TestConsole_HeadsRebuildThatCanNotBeReadIsSaidExceptOnAStandby(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	exec(t, b.db.Pool, `
		CREATE OR REPLACE FUNCTION outbox.heads_rebuild(queue text) RETURNS TABLE(rebuilding boolean, rebuilt_through text)
		LANGUAGE plpgsql STABLE AS $$ BEGIN
		  RAISE EXCEPTION 'cannot access temporary or unlogged relations during recovery' USING ERRCODE = '0A000';
		END $$`)
	c := startConsole(t, console.Config{Reader: b.reader, ReadOnly: true}, &syncBuffer{})
	page := queuePage(t, c)
	require.NotContains(t, page, "unlogged relations")
	require.NotContains(t, page, "being rebuilt")

	exec(t, b.db.Pool, `REVOKE EXECUTE ON FUNCTION outbox.heads_rebuild(text) FROM pgdrain_reader, PUBLIC`)
	require.Contains(t, queuePage(t, c), `<li class="error">whether its partition heads are being rebuilt could not be read: permission denied for function heads_rebuild`)
}
