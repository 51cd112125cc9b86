package limit

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func TestLRUEvictsLeastRecentlyUsed(t *testing.T) {
	c := NewLRU[string, int](3, nil)
	c.Put("a", 1)
	c.Put("b", 2)
	c.Put("c", 3)
	_, ok := c.Get("a") // a is now most recent; b is the oldest
	require.True(t, ok)
	c.Put("d", 4)
	assert.Equal(t, 3, c.Len())
	_, ok = c.Get("b")
	assert.False(t, ok, "b was least recently used and must be evicted")
	for _, k := range []string{"a", "c", "d"} {
		_, ok := c.Get(k)
		assert.True(t, ok, k)
	}
	c.Put("a", 10) // update in place, no eviction
	v, _ := c.Get("a")
	assert.Equal(t, 10, v)
	assert.Equal(t, 3, c.Len())
	c.RemoveIf(func(k string) bool { return k == "c" || k == "d" })
	assert.Equal(t, 1, c.Len())
	c.Clear()
	assert.Equal(t, 0, c.Len())
}

func TestLRUExpiry(t *testing.T) {
	clk := newClock()
	c := NewLRU[string, int](10, clk.Now)
	c.PutTTL("x", 1, time.Second)
	_, ok := c.Get("x")
	require.True(t, ok)
	clk.Add(time.Second)
	_, ok = c.Get("x")
	assert.False(t, ok, "entry must be gone at its expiry")
	assert.Equal(t, 0, c.Len(), "expired entry dropped on access")
}

func TestLRUStaysBoundedUnderRandomKeys(t *testing.T) {
	c := NewLRU[string, struct{}](100, nil)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5000; i++ {
				c.Put(fmt.Sprintf("%d-%d", g, i), struct{}{})
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 100, c.Len())
}

func TestLimiterPerKeyAndGlobal(t *testing.T) {
	clk := newClock()
	l := NewLimiter(LimiterConfig{PerKeyRate: 1, PerKeyBurst: 3, GlobalRate: 100, GlobalBurst: 5, MaxKeys: 2, Now: clk.Now})
	for i := 0; i < 3; i++ {
		assert.True(t, l.Allow("a"), "burst token %d", i)
	}
	assert.False(t, l.Allow("a"), "per-key bucket empty")
	assert.True(t, l.Allow("b"))
	assert.True(t, l.Allow("c"))
	assert.False(t, l.Allow("d"), "global bucket (5) empty even for a fresh key")
	assert.LessOrEqual(t, l.Keys(), 2, "bucket set is bounded")

	clk.Add(time.Second) // +1 token per key, +100 global (capped at 5)
	l2 := NewLimiter(LimiterConfig{PerKeyRate: 1, PerKeyBurst: 1, GlobalRate: 100, GlobalBurst: 100, Now: clk.Now})
	assert.True(t, l2.Allow("x"))
	assert.False(t, l2.Allow("x"))
	clk.Add(500 * time.Millisecond)
	assert.False(t, l2.Allow("x"), "half a token is not a token")
	clk.Add(500 * time.Millisecond)
	assert.True(t, l2.Allow("x"), "refilled after one second")
}

func TestLimiterRandomKeysCannotExceedGlobalRate(t *testing.T) {
	clk := newClock()
	l := NewLimiter(LimiterConfig{PerKeyRate: 10, PerKeyBurst: 10, GlobalRate: 50, GlobalBurst: 50, MaxKeys: 16, Now: clk.Now})
	allowed := 0
	for s := 0; s < 10; s++ { // 10 simulated seconds
		for i := 0; i < 1000; i++ {
			if l.Allow(fmt.Sprintf("rnd-%d-%d", s, i)) {
				allowed++
			}
		}
		clk.Add(time.Second)
	}
	assert.Equal(t, 50*10, allowed, "burst 50 then 50/s for 9 more seconds")
	assert.LessOrEqual(t, l.Keys(), 16)
}

func TestMissGuard(t *testing.T) {
	clk := newClock()
	g := NewMissGuard(MissGuardConfig{NegativeEntries: 4, NegativeTTL: time.Second,
		Limiter: LimiterConfig{PerKeyRate: 1, PerKeyBurst: 2, GlobalRate: 100, GlobalBurst: 100, Now: clk.Now}})

	require.NoError(t, g.Admit("ns1", "n1/0/1"))
	g.RecordMiss("n1/0/1")
	assert.ErrorIs(t, g.Admit("ns1", "n1/0/1"), ErrKnownMiss, "repeated miss answered from the negative cache")

	require.NoError(t, g.Admit("ns1", "n1/0/2"))
	assert.ErrorIs(t, g.Admit("ns1", "n1/0/3"), ErrRateLimited, "ns1 spent its burst of 2")
	assert.NoError(t, g.Admit("ns2", "n1/0/3"), "another namespace has its own bucket")

	g.Forget("n1/0/1")
	clk.Add(time.Second)
	assert.NoError(t, g.Admit("ns1", "n1/0/1"), "forgotten miss is looked up again")

	g.RecordMiss("k")
	clk.Add(time.Second)
	assert.NotErrorIs(t, g.Admit("ns3", "k"), ErrKnownMiss, "negative entries expire")

	for i := 0; i < 10; i++ {
		g.RecordMiss(fmt.Sprint(i))
	}
	assert.Equal(t, 4, g.Remembered(), "negative cache is bounded")
	g.ForgetAll()
	assert.Equal(t, 0, g.Remembered())
}

func TestLabelsAreBounded(t *testing.T) {
	l := NewLabels(2)
	assert.Equal(t, "a", l.Value("a"))
	assert.Equal(t, "b", l.Value("b"))
	assert.Equal(t, OtherLabel, l.Value("c"))
	assert.Equal(t, "a", l.Value("a"), "admitted values stay")
	assert.Equal(t, OtherLabel, l.Value(OtherLabel))
	l.Forget("a")
	assert.Equal(t, "c", l.Value("c"), "a freed slot is reused")
	assert.Equal(t, 2, l.Len())

	big := NewLabels(50)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				_ = big.Value(fmt.Sprintf("ns-%d-%d", g, i))
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 50, big.Len())
}
