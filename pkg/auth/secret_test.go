package auth

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckSecret(t *testing.T) {
	gen, err := GenerateSecret(AdminTokenPrefix)
	require.NoError(t, err)
	gen2, _ := GenerateSecret("")
	assert.NotEqual(t, gen, gen2)
	assert.True(t, strings.HasPrefix(gen, AdminTokenPrefix))
	cases := []struct {
		s  string
		ok bool
	}{
		{"", false},
		{"zonefleet", false},
		{"ZoneFleet", false},
		{"zonefleetzonefleetzonefleetzonefleet", false}, // repeated well-known word, 36 bytes
		{"local-1763870000000000000", false},
		{"local-" + gen, false},
		{"short-but-random-Xy7", false},
		{strings.Repeat("a", 64), false},
		{strings.Repeat("ab", 32), false},
		{"01234567890123456789012345678901", false}, // 32 bytes of 10 symbols: ~106 bits
		{gen, true},
		{gen2, true},
		{"c2c7b1f0e9d84a6b8e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f", true}, // 64 hex digits
	}
	for _, tc := range cases {
		err := CheckSecret(tc.s)
		if tc.ok {
			assert.NoError(t, err, tc.s)
		} else {
			assert.ErrorIs(t, err, ErrWeakSecret, "%q", tc.s)
		}
	}
}

func TestLoadSecret(t *testing.T) {
	dir := t.TempDir()
	gen, _ := GenerateSecret(AdminTokenPrefix)
	good := filepath.Join(dir, "admin.token")
	require.NoError(t, os.WriteFile(good, []byte(gen+"\n"), 0o600))
	s, err := LoadSecret(good, "ZONEFLEET_TEST_UNSET")
	require.NoError(t, err)
	assert.Equal(t, gen, s, "trailing newline trimmed")

	open := filepath.Join(dir, "open.token")
	require.NoError(t, os.WriteFile(open, []byte(gen), 0o644))
	_, err = LoadSecret(open, "")
	assert.ErrorContains(t, err, "others")

	weak := filepath.Join(dir, "weak.token")
	require.NoError(t, os.WriteFile(weak, []byte("zonefleet"), 0o600))
	_, err = LoadSecret(weak, "")
	assert.ErrorIs(t, err, ErrWeakSecret)

	t.Setenv("ZONEFLEET_TEST_SECRET", gen)
	s, err = LoadSecret("", "ZONEFLEET_TEST_SECRET")
	require.NoError(t, err)
	assert.Equal(t, gen, s)
	t.Setenv("ZONEFLEET_TEST_SECRET", "local-123")
	_, err = LoadSecret("", "ZONEFLEET_TEST_SECRET")
	assert.ErrorIs(t, err, ErrWeakSecret)
	_, err = LoadSecret("", "ZONEFLEET_TEST_UNSET")
	assert.ErrorIs(t, err, ErrNoSecret)
	_, err = LoadSecret(filepath.Join(dir, "missing"), "")
	assert.Error(t, err)
}

func TestNewRefusesWeakOrEmptyConfig(t *testing.T) {
	_, err := New(Config{AdminToken: "zonefleet"})
	assert.ErrorIs(t, err, ErrWeakSecret, "servers refuse the old compose token")
	_, err = New(Config{AdminToken: "local-42"})
	assert.ErrorIs(t, err, ErrWeakSecret)
	_, err = New(Config{})
	assert.Error(t, err, "nothing could authenticate: refuse to start rather than allow everyone")
}

func TestCredentialHash(t *testing.T) {
	cred, err := GenerateSecret(NamespaceCredentialPrefix)
	require.NoError(t, err)
	other, _ := GenerateSecret(NamespaceCredentialPrefix)
	h := CredentialHash(cred)
	assert.True(t, CredentialMatches(cred, h))
	assert.False(t, CredentialMatches(other, h))
	assert.False(t, CredentialMatches("", h))
	assert.False(t, CredentialMatches(cred+"x", h))
}
