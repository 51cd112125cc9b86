// Package ondisk holds what every on-disk header of ZoneFleet shares: the
// ext4/F2FS-style feature bit sets that let a format evolve without a flag
// day.
//
//   - compat: a feature an older build may ignore entirely (it can read and
//     write the image as if the feature were absent).
//   - ro_compat: an older build can read the image but must not write it
//     (it would break the feature's invariants): it mounts read-only or
//     refuses a writable open.
//   - incompat: an older build cannot even read the image: refuse.
//
// A header stores the three sets as little-endian uint64s (Encode/Decode);
// Check compares the stored sets against what the running build knows and
// returns a *FeatureError naming the unknown bits. FeatureError unwraps to a
// *zerr.GeometryMismatchError (the image was made by a build with another
// format than this one supports: a precondition, not corruption), so it
// travels over gRPC as FAILED_PRECONDITION through pkg/rpcerr without a
// table change, and callers that skip corrupt records do not skip it. The package has no
// state and is safe for concurrent use.
package ondisk

import (
	"encoding/binary"
	"fmt"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Size is the encoded size of a Features value.
const Size = 24

// Features are the three feature bit sets of a header.
type Features struct {
	Compat, ROCompat, Incompat uint64
}

// Encode writes f into b[:Size].
func (f Features) Encode(b []byte) {
	binary.LittleEndian.PutUint64(b[0:], f.Compat)
	binary.LittleEndian.PutUint64(b[8:], f.ROCompat)
	binary.LittleEndian.PutUint64(b[16:], f.Incompat)
}

// Decode reads Features from b[:Size].
func Decode(b []byte) Features {
	return Features{binary.LittleEndian.Uint64(b[0:]), binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])}
}

// Class names a feature set.
type Class string

// The feature classes.
const (
	ClassROCompat Class = "ro_compat"
	ClassIncompat Class = "incompat"
)

// FeatureError: an image uses features this build does not know.
type FeatureError struct {
	Path    string
	Class   Class  // ro_compat: readable, not writable; incompat: unreadable
	Unknown uint64 // the unknown bits
}

func (e *FeatureError) reason() string {
	if e.Class == ClassIncompat {
		return fmt.Sprintf("unsupported incompatible feature bits %#x (written by a newer build): refusing to open", e.Unknown)
	}
	return fmt.Sprintf("unsupported read-only-compatible feature bits %#x (written by a newer build): may be opened read-only only", e.Unknown)
}

func (e *FeatureError) Error() string { return e.Path + ": " + e.reason() }

// Unwrap makes errors.As(err, **zerr.GeometryMismatchError) and
// errors.Is(err, zerr.ErrGeometryMismatch) hold.
func (e *FeatureError) Unwrap() error {
	return &zerr.GeometryMismatchError{Field: e.Path + " " + string(e.Class) + " features", Have: fmt.Sprintf("%#x (unknown bits)", e.Unknown), Want: "none unknown to this build"}
}

// Check compares the features of an image (have) with those this build
// knows. Unknown compat bits are fine. Unknown incompat bits give a
// FeatureError (ClassIncompat). Unknown ro_compat bits give a FeatureError
// (ClassROCompat) and readOnly=true: the caller may still open the image
// read-only.
func Check(path string, have, known Features) (readOnly bool, err error) {
	if u := have.Incompat &^ known.Incompat; u != 0 {
		return false, &FeatureError{Path: path, Class: ClassIncompat, Unknown: u}
	}
	if u := have.ROCompat &^ known.ROCompat; u != 0 {
		return true, &FeatureError{Path: path, Class: ClassROCompat, Unknown: u}
	}
	return false, nil
}
