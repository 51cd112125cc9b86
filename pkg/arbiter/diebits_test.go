package arbiter

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// dieBits finds the lowest free zone of a die group, copies on write and
// stays canonical (no trailing zero words), so a derived index equals a
// rebuilt one.
func TestDieBits(t *testing.T) {
	var b dieBits
	k, ok := b.firstFree(3)
	assert.True(t, ok)
	assert.Zero(t, k)
	_, ok = b.firstFree(0)
	assert.False(t, ok, "a die group without zones")
	for i := uint32(0); i < 70; i++ {
		b = b.with(i, true)
	}
	k, ok = b.firstFree(100)
	assert.True(t, ok)
	assert.Equal(t, uint32(70), k)
	_, ok = b.firstFree(70)
	assert.False(t, ok, "every zone of a 70-zone die group is allocated")
	shared := b
	c := b.with(5, false)
	k, _ = c.firstFree(100)
	assert.Equal(t, uint32(5), k)
	k, _ = shared.firstFree(100)
	assert.Equal(t, uint32(70), k, "the shared set is unchanged")
	for i := uint32(0); i < 70; i++ {
		c = c.with(i, false)
	}
	assert.Empty(t, c, "canonical: an empty set has no words")
	d := dieBits(nil).with(130, true).with(130, false)
	assert.Empty(t, d)
}
