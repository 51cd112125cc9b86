package auth

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRefreshingSource(t *testing.T) {
	c := &clk{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	var fetches atomic.Int64
	var fail atomic.Bool
	block := make(chan struct{})
	var blocking atomic.Bool
	src := NewRefreshingSource(func(ctx context.Context) (string, time.Time, error) {
		n := fetches.Add(1)
		if blocking.Load() {
			<-block
		}
		if fail.Load() {
			return "", time.Time{}, errors.New("arbiter unreachable")
		}
		return "tok-" + string(rune('0'+n)), c.now().Add(9 * time.Minute), nil
	}, c.now)
	ctx := context.Background()

	tok, err := src.Token(ctx)
	require.NoError(t, err)
	assert.Equal(t, "tok-1", tok)
	c.add(5 * time.Minute) // before 2/3 of 9 minutes
	tok, _ = src.Token(ctx)
	assert.Equal(t, "tok-1", tok)
	assert.Equal(t, int64(1), fetches.Load())

	// Past the refresh point: callers keep getting the valid token without
	// waiting while one background refresh runs.
	blocking.Store(true)
	c.add(2 * time.Minute)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok, err := src.Token(ctx)
			assert.NoError(t, err)
			assert.Equal(t, "tok-1", tok)
		}()
	}
	wg.Wait()
	require.Eventually(t, func() bool { return fetches.Load() == 2 }, 30*time.Second, time.Millisecond, "the refresh starts")
	for i := 0; i < 8; i++ {
		tok, err := src.Token(ctx)
		require.NoError(t, err)
		assert.Equal(t, "tok-1", tok)
	}
	assert.Equal(t, int64(2), fetches.Load(), "exactly one refresh in flight")
	blocking.Store(false)
	close(block)
	require.Eventually(t, func() bool { tok, _ := src.Token(ctx); return tok == "tok-2" }, 30*time.Second, time.Millisecond)

	// Expired and the fetch fails: the caller gets the fetch error.
	fail.Store(true)
	c.add(time.Hour)
	_, err = src.Token(ctx)
	assert.ErrorContains(t, err, "arbiter unreachable")
	// Recovers once the arbiter answers.
	fail.Store(false)
	tok, err = src.Token(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, "tok-2", tok)

	_, err = StaticToken("").Token(ctx)
	assert.Error(t, err)
}

func TestFileToken(t *testing.T) {
	c := &clk{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	p := filepath.Join(t.TempDir(), "tenant.token")
	src := NewFileToken(p, time.Minute, c.now)
	_, err := src.Token(context.Background())
	assert.Error(t, err, "no file yet")

	require.NoError(t, os.WriteFile(p, []byte("zf1.one\n"), 0o600))
	c.add(time.Minute)
	tok, err := src.Token(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "zf1.one", tok)

	require.NoError(t, os.WriteFile(p, []byte("zf1.two\n"), 0o600))
	tok, _ = src.Token(context.Background())
	assert.Equal(t, "zf1.one", tok, "not re-read within the interval")
	c.add(time.Minute)
	tok, _ = src.Token(context.Background())
	assert.Equal(t, "zf1.two", tok, "rotation picked up")

	require.NoError(t, os.Chmod(p, 0o644))
	c.add(time.Minute)
	tok, err = src.Token(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "zf1.two", tok, "a bad re-read keeps the last token")
	_, err = NewFileToken(p, 0, nil).Token(context.Background())
	assert.ErrorContains(t, err, "others", "world-readable token files are refused")
	require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(p), "empty"), nil, 0o600))
	_, err = NewFileToken(filepath.Join(filepath.Dir(p), "empty"), 0, nil).Token(context.Background())
	assert.Error(t, err)
}
