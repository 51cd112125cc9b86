// Package etcdrbac is the least-privilege etcd access of a ZoneFleet
// cluster: etcd's own authentication and role-based access control over
// the common names of the component certificates (etcd with
// --client-cert-auth and auth enabled takes a client certificate's CN as
// the user name; pkg/pki gives every certificate its role as CN).
//
//	user (cert CN)   role                  may
//	node:<id>        zonefleet-node-<id>   write its own registration (nodes/<id>, under its lease);
//	                                       read every registration (peer resolution), its own
//	                                       grants (grants/<id>/), namespaces, token generations
//	arbiter          zonefleet-arbiter     read and write everything under the cluster prefix
//	                                       (grants, layouts, namespaces, token generations, election)
//	admin            zonefleet-admin       read everything under the cluster prefix (leader discovery)
//	etcd             root                  administer etcd (its own certificate: only the etcd
//	                                       process and the tool that sets the roles up hold it)
//	root             root                  required by etcd to enable authentication; no password,
//	                                       no certificate names it
//
// Tenants hold no certificate and never reach etcd. So a stolen node
// certificate can no longer rewrite another node's address, write a grant,
// lower a token generation (un-revoke) or touch the arbiter's state: etcd
// answers PermissionDenied.
//
// Apply is idempotent (an existing role or user is kept, permissions are
// granted again) and is run with a client holding the etcd certificate
// before the components start, and again when nodes are added.
package etcdrbac

import (
	"context"
	"errors"
	"fmt"

	"github.com/zonefleet/zonefleet/pkg/auth/tokengen"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/pki"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Role names.
const (
	RoleArbiter = "zonefleet-arbiter"
	RoleAdmin   = "zonefleet-admin"
	rootRole    = "root"
	rootUser    = "root"
)

// NodeRole is the role of node id.
func NodeRole(id string) string { return "zonefleet-node-" + id }

// Perm is one permission of a role: a key, or a prefix when Prefix.
type Perm struct {
	Key    string
	Prefix bool
	Write  bool // read and write; otherwise read only
}

// RoleSpec is a role and its permissions; Users are granted it.
type RoleSpec struct {
	Name  string
	Perms []Perm
	Users []string
}

// Plan is the roles of a cluster with the given node ids.
func Plan(nodeIDs []string) []RoleSpec {
	plan := []RoleSpec{
		{Name: RoleArbiter, Perms: []Perm{{Key: cluster.Prefix, Prefix: true, Write: true}},
			Users: []string{pki.Role{Kind: pki.RoleArbiter}.String()}},
		{Name: RoleAdmin, Perms: []Perm{{Key: cluster.Prefix, Prefix: true}},
			Users: []string{pki.Role{Kind: pki.RoleAdmin}.String()}},
	}
	for _, id := range nodeIDs {
		plan = append(plan, RoleSpec{Name: NodeRole(id), Users: []string{pki.Role{Kind: pki.RoleNode, Name: id}.String()}, Perms: []Perm{
			{Key: cluster.NodeKey(id), Write: true},
			{Key: cluster.NodesPrefix(), Prefix: true},
			{Key: cluster.GrantsPrefix(id), Prefix: true},
			{Key: cluster.NamespacesPrefix(), Prefix: true},
			{Key: tokengen.Prefix(), Prefix: true},
			{Key: cluster.Prefix + "ping"}, // etcdlocal.ConnectWith's probe
		}})
	}
	return plan
}

// Apply creates the roles and users of Plan(nodeIDs), grants the
// permissions, gives root to the root user and to the etcd certificate's
// user, and enables authentication. cli must be allowed to administer
// etcd: before authentication is enabled anyone is; after, the etcd
// certificate is.
func Apply(ctx context.Context, cli *clientv3.Client, nodeIDs []string) error {
	if err := ensureRole(ctx, cli, rootRole); err != nil {
		return err
	}
	etcdUser := pki.Role{Kind: pki.RoleEtcd}.String()
	for _, u := range []string{rootUser, etcdUser} {
		if err := ensureUser(ctx, cli, u, rootRole); err != nil {
			return err
		}
	}
	for _, r := range Plan(nodeIDs) {
		if err := ensureRole(ctx, cli, r.Name); err != nil {
			return err
		}
		for _, p := range r.Perms {
			end := ""
			if p.Prefix {
				end = clientv3.GetPrefixRangeEnd(p.Key)
			}
			typ := clientv3.PermissionType(clientv3.PermRead)
			if p.Write {
				typ = clientv3.PermissionType(clientv3.PermReadWrite)
			}
			if _, err := cli.RoleGrantPermission(ctx, r.Name, p.Key, end, typ); err != nil {
				return fmt.Errorf("etcd role %s: grant %s: %w", r.Name, p.Key, err)
			}
		}
		for _, u := range r.Users {
			if err := ensureUser(ctx, cli, u, r.Name); err != nil {
				return err
			}
		}
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("etcd: enable authentication: %w", err)
	}
	return nil
}

func ensureRole(ctx context.Context, cli *clientv3.Client, name string) error {
	if _, err := cli.RoleAdd(ctx, name); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
		return fmt.Errorf("etcd: add role %s: %w", name, err)
	}
	return nil
}

func ensureUser(ctx context.Context, cli *clientv3.Client, name, role string) error {
	if _, err := cli.UserAddWithOptions(ctx, name, "", &clientv3.UserAddOptions{NoPassword: true}); err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		return fmt.Errorf("etcd: add user %s: %w", name, err)
	}
	if _, err := cli.UserGrantRole(ctx, name, role); err != nil {
		return fmt.Errorf("etcd: grant role %s to %s: %w", role, name, err)
	}
	return nil
}
