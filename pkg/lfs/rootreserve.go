package lfs

import (
	"context"
	"fmt"
	"math"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// The root-reserved share (ext4's reserved blocks, mkfs -m).
//
// A share of the user blocks is kept from every caller but root, so a file
// system that unprivileged programs filled still lets root work: open a
// WAL-mode SQLite database (its -wal and -shm files need blocks before the
// first read), rotate a log, move files off, repair with fsck. Operations
// carry the privilege in their context (WithRootReserve; the FUSE binding
// sets it for requests of uid 0); the file system's own work — checkpoints,
// recycling, roll-forward recovery, fsck's repairs — allocates without
// these checks, or as root. The write-back of pages the kernel cached for
// a handle counts as its opener (the write-back request carries the
// flusher's credentials, not the writer's).
//
// Below the user blocks' limit, from the top: the write-back reserve
// (Options.WriteReserveBlocks; only the kernel's write-backs fill it), then
// the root-reserved share (root's write(2), create and fallocate may fill
// it); the rest is everyone's. Statfs reports the share as ext4 does: in
// Bfree, not in Bavail.
//
// The share is fixed by Mkfs (MkfsOptions.ReservedRootPercent) and stored
// in the superblock behind FeatureRootReserve; Options.ReservedRootPercent
// overrides it for one mount.

// FeatureRootReserve (compat) says the superblock carries the
// root-reserved share (a u64 of blocks after the feature bits). An older
// build ignores the field: it lets every caller fill the share, which
// breaks nothing stored, so the bit is compat. Such a build rewriting the
// superblock keeps the bit and drops the field, which then reads as no
// share.
const FeatureRootReserve = 1 << 1

// DefaultReservedRootPercent is what `zctl mkfs` reserves for root when not
// told: 1 % of the user blocks (ext4 reserves 5 %, sized for disks of the
// 1990s; a percent of today's volumes is gigabytes, plenty for recovery),
// at least MinRootReserveBytes.
const DefaultReservedRootPercent = 1.0

// MinRootReserveBytes is the least a non-zero share reserves: what root's
// recovery needs is a few files' worth, not a proportion (a WAL-mode SQLite
// open writes a 32 KiB -shm and replays its WAL; fsck reattaches inodes in
// lost+found), so on a small file system 1 % would be too little.
const MinRootReserveBytes = 4 << 20

// maxReservedRootPercent bounds the share Mkfs and Mount accept.
const maxReservedRootPercent = 50

// RootReserveBlocks returns the share of userBlocks (of bs bytes) that pct
// percent reserves: none for 0, else at least MinRootReserveBytes, at most
// half of the user blocks.
func RootReserveBlocks(userBlocks uint64, bs int, pct float64) uint64 {
	if pct <= 0 {
		return 0
	}
	n := uint64(math.Ceil(float64(userBlocks) * pct / 100))
	n = max(n, uint64(MinRootReserveBytes)/uint64(bs))
	return min(n, userBlocks/2)
}

// checkRootPercent validates a share given in percent.
func checkRootPercent(pct float64) error {
	if pct < 0 || pct > maxReservedRootPercent || math.IsNaN(pct) {
		return &zerr.InvalidArgumentError{Field: "reserved_root_percent", Reason: fmt.Sprintf("%g is not in [0, %d]", pct, maxReservedRootPercent)}
	}
	return nil
}

type rootReserveKey struct{}

// WithRootReserve returns ctx for an operation of a caller that may fill
// the root-reserved share (uid 0).
func WithRootReserve(ctx context.Context) context.Context {
	return context.WithValue(ctx, rootReserveKey{}, true)
}

// mayUseRootReserve reports whether ctx is WithRootReserve's.
func mayUseRootReserve(ctx context.Context) bool {
	v, _ := ctx.Value(rootReserveKey{}).(bool)
	return v
}

// rootReserve is the share in blocks for this mount.
func (fs *FS) rootReserve() uint64 {
	switch p := fs.opts.ReservedRootPercent; {
	case p < 0:
		return 0
	case p > 0:
		return RootReserveBlocks(fs.sb.UserBlocks, fs.bs, p)
	}
	return min(fs.sb.RootReserve, fs.sb.UserBlocks/2)
}

// userLimit is the user blocks an operation may fill before the
// write-back reserve: all of them for root (priv), the rest less the
// root-reserved share for everyone else.
func (fs *FS) userLimit(priv bool) uint64 {
	if priv {
		return fs.sb.UserBlocks
	}
	return fs.sb.UserBlocks - min(fs.sb.UserBlocks, fs.rootReserve())
}

// RootReserveBlocks is the root-reserved share of this mount in blocks.
func (fs *FS) RootReserveBlocks() uint64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.rootReserve()
}
