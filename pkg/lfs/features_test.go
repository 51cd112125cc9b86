package lfs

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/ondisk"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// v1Superblock encodes s as format version 1 did (no feature bits).
func v1Superblock(s superblock) []byte {
	s.Version = 1
	return s.encode()
}

func TestSuperblockVersions(t *testing.T) {
	s := superblock{Version: FormatVersion, BlockSize: 4096, ZoneBlocks: 64, MaxZones: 32, OPPercent: 10, Logs: 6, UserBlocks: 100, ReserveSegs: 10, MaxNodes: 7}
	got, err := decodeSuperblock(v1Superblock(s))
	require.NoError(t, err, "version 1 is read")
	require.Equal(t, s, got, "and upgraded: written back as version 2")
	require.Len(t, s.encode(), len(v1Superblock(s))+ondisk.Size)
	for _, tc := range []struct {
		name  string
		feat  ondisk.Features
		class ondisk.Class
	}{
		{"unknown compat accepted", ondisk.Features{Compat: 1 << 4}, ""},
		{"unknown ro_compat refused for a writable mount", ondisk.Features{ROCompat: 1 << 2}, ondisk.ClassROCompat},
		{"unknown incompat refused", ondisk.Features{Incompat: 1 << 40}, ondisk.ClassIncompat},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s2 := s
			s2.Features = tc.feat
			got, err := decodeSuperblock(s2.encode())
			if tc.class == "" {
				require.NoError(t, err)
				require.Equal(t, s2, got)
				return
			}
			var fe *ondisk.FeatureError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tc.class, fe.Class)
			require.ErrorIs(t, err, zerr.ErrGeometryMismatch)
		})
	}
	// a truncated version 2 superblock is corrupt, not a short feature set
	_, err = decodeSuperblock(s.encode()[:len(s.encode())-3])
	require.ErrorIs(t, err, zerr.ErrCorrupt)
}

// RewriteSuperFeatures sets the feature bits of the superblock record at
// the start of buf (the first block of a metadata zone) and reseals it, as a
// newer build would have written it; false when buf holds no superblock.
// For the external tests.
func RewriteSuperFeatures(buf []byte, f ondisk.Features) bool {
	if len(buf) < metaHdrLen || binary.LittleEndian.Uint32(buf) != magicMeta || recType(buf[4]) != recSuper {
		return false
	}
	rec, err := decodeMetaRecord(buf)
	if err != nil {
		return false
	}
	sb, err := decodeSuperblock(rec.Payload)
	if err != nil {
		return false
	}
	sb.Features = f
	rec.Payload = sb.encode()
	nb := encodeMetaRecord(rec, len(buf))
	if len(nb) != len(buf) {
		return false
	}
	copy(buf, nb)
	return true
}

// The root-reserved share rides behind a compat bit: written and read with
// it, absent without it, and a superblock that has the bit but lost the
// field (rewritten by a build that did not know it) reads as no share.
func TestSuperblockRootReserve(t *testing.T) {
	s := superblock{Version: FormatVersion, BlockSize: 4096, ZoneBlocks: 64, MaxZones: 32, OPPercent: 10, Logs: 6, UserBlocks: 100, ReserveSegs: 10, MaxNodes: 7,
		Features: ondisk.Features{Compat: FeatureInodeRdev | FeatureRootReserve}, RootReserve: 9}
	got, err := decodeSuperblock(s.encode())
	require.NoError(t, err)
	require.Equal(t, s, got)

	without := s
	without.Features.Compat &^= FeatureRootReserve
	require.Len(t, without.encode(), len(s.encode())-8)
	got, err = decodeSuperblock(without.encode())
	require.NoError(t, err)
	require.Zero(t, got.RootReserve, "no bit, no share")

	lost := s.encode()
	got, err = decodeSuperblock(lost[:len(lost)-8])
	require.NoError(t, err)
	require.Zero(t, got.RootReserve, "the bit without the field reads as no share")
	require.NotZero(t, got.Features.Compat&FeatureRootReserve)
}
