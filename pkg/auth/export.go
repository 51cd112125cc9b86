package auth

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/zonefleet/zonefleet/pkg/pki"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Least privilege per component (ExportDir). The directory of `zctl cert
// init` holds everything: the CA key, the token signing key, the admin
// token and every component's key. Mounting it into every container would
// hand a compromised node the CA key (it could then issue itself an admin
// certificate) and the signing key (it could mint tokens for every
// tenant). ExportDir copies out, per component, only what that component
// loads:
//
//	component   files
//	etcd        ca.crt, etcd.crt, etcd.key
//	arbiter     ca.crt, arbiter.crt, arbiter.key, token-verify.pub, token-signing.key
//	node-<id>   ca.crt, node-<id>.crt, node-<id>.key, token-verify.pub
//	admin       ca.crt, admin.crt, admin.key, admin.token (the operator's, for the host)
//
// ca.key never leaves the init directory. The admin token goes to no
// server: servers then accept no admin bearer token at all, the operator
// authenticates with the admin certificate (a server with a CA and its
// certificate needs no admin token to start).

// ExportedFiles lists the files of component (a ComponentFileName: "etcd",
// "arbiter", "admin" or "node-<id>") in the order ExportDir writes them.
func ExportedFiles(component string) ([]string, error) {
	r, err := ComponentRole(component)
	if err != nil {
		return nil, err
	}
	files := []string{FileCA, component + ".crt", component + ".key"}
	switch r.Kind {
	case pki.RoleArbiter:
		files = append(files, FileVerifyKeys, FileSigningKey)
	case pki.RoleNode:
		files = append(files, FileVerifyKeys)
	case pki.RoleAdmin:
		files = append(files, FileAdminToken)
	}
	return files, nil
}

// ComponentRole is the inverse of ComponentFileName.
func ComponentRole(component string) (pki.Role, error) {
	var r pki.Role
	if id, ok := strings.CutPrefix(component, "node-"); ok {
		r = pki.Role{Kind: pki.RoleNode, Name: id}
	} else {
		r = pki.Role{Kind: pki.RoleKind(component)}
	}
	if err := r.Validate(); err != nil {
		return pki.Role{}, &zerr.InvalidArgumentError{Field: "component", Reason: fmt.Sprintf("%q: %v (want etcd, arbiter, admin or node-<id>)", component, err)}
	}
	if ComponentFileName(r) != component {
		return pki.Role{}, &zerr.InvalidArgumentError{Field: "component", Reason: fmt.Sprintf("%q is not a component name (want etcd, arbiter, admin or node-<id>)", component)}
	}
	return r, nil
}

// Components lists the components whose certificate and key are in dir
// (sorted).
func Components(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".crt")
		if !ok || name == "ca" || !e.Type().IsRegular() {
			continue
		}
		if _, err := ComponentRole(name); err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, name+".key")); err != nil {
			continue
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out, nil
}

// trustFile reports whether name looks like trust material (what an export
// directory may hold and ExportDir cleans up when it is not the
// component's own).
func trustFile(name string) bool {
	for _, s := range []string{".crt", ".key", ".pub", ".token"} {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// ExportDir copies component's files (ExportedFiles) from the `zctl cert
// init` directory src into out (created 0700; files 0600, written
// atomically). It is idempotent: files whose content is already equal are
// left alone (WrittenFile lists only what changed), so an init step can
// run it at every start and a renewed certificate in src reaches out at the
// next run. Trust files in out that component must not hold (ca.key, the
// signing key on a node, another component's key, left by an older
// layout or by hand) are removed. out must not be src. Nothing is written
// when a source file is missing.
func ExportDir(src, component, out string) ([]WrittenFile, error) {
	if src == "" || out == "" {
		return nil, &zerr.InvalidArgumentError{Field: "dir", Reason: "source and export directories are required"}
	}
	names, err := ExportedFiles(component)
	if err != nil {
		return nil, err
	}
	as, err := filepath.Abs(src)
	if err != nil {
		return nil, err
	}
	ao, err := filepath.Abs(out)
	if err != nil {
		return nil, err
	}
	if as == ao {
		return nil, &zerr.InvalidArgumentError{Field: "out", Reason: "the export directory must not be the init directory (it holds ca.key)"}
	}
	data := make(map[string][]byte, len(names))
	for _, n := range names {
		p := filepath.Join(src, n)
		var b []byte
		if strings.HasSuffix(n, ".crt") || n == FileVerifyKeys {
			b, err = os.ReadFile(p)
		} else {
			b, err = pki.ReadPrivateFile(p)
		}
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, &zerr.NotFoundError{Kind: "file", Name: p + " (run zctl cert init / zctl cert issue first)"}
			}
			return nil, err
		}
		data[n] = b
	}
	if err := os.MkdirAll(out, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chmod(out, 0o700); err != nil {
		return nil, err
	}
	var written []WrittenFile
	keep := map[string]bool{}
	for _, n := range names {
		keep[n] = true
		p := filepath.Join(out, n)
		if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, data[n]) {
			if st, err := os.Lstat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm() == 0o600 {
				continue
			}
		}
		if err := pki.WriteFile(p, data[n], true); err != nil {
			return nil, err
		}
		written = append(written, WrittenFile{Path: p, Kind: exportKind(n), Role: component})
	}
	ents, err := os.ReadDir(out)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if keep[e.Name()] || !trustFile(e.Name()) {
			continue
		}
		if err := os.Remove(filepath.Join(out, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		written = append(written, WrittenFile{Path: filepath.Join(out, e.Name()), Kind: "removed", Role: component})
	}
	return written, nil
}

// ExportAll exports every component found in src (Components) into
// out/<component>/.
func ExportAll(src, out string) ([]WrittenFile, error) {
	comps, err := Components(src)
	if err != nil {
		return nil, err
	}
	if len(comps) == 0 {
		return nil, &zerr.NotFoundError{Kind: "component certificate", Name: src}
	}
	var all []WrittenFile
	for _, c := range comps {
		w, err := ExportDir(src, c, filepath.Join(out, c))
		if err != nil {
			return all, err
		}
		all = append(all, w...)
	}
	return all, nil
}

func exportKind(name string) string {
	switch {
	case name == FileCA:
		return "ca-cert"
	case name == FileVerifyKeys:
		return "token-verify-keys"
	case name == FileSigningKey:
		return "token-signing-key"
	case name == FileAdminToken:
		return "admin-token"
	case strings.HasSuffix(name, ".crt"):
		return "cert"
	default:
		return "key"
	}
}
