// Package auth decides who is calling a ZoneFleet gRPC server and what that
// caller may do: it verifies credentials (client certificates through
// pkg/pki, signed namespace tokens, the admin token), puts a verified
// Identity in the call's context and enforces a per-method policy. It also
// holds the client side (per-RPC credentials, refreshing token sources,
// NodeCredentials for dialling a node by id) and the secret-handling rules.
// Package etcdrbac holds the etcd roles, tokengen the token generations,
// peerdial the node-to-node dialling, limit the bounded caches and buckets.
//
// # Credentials
//
//	caller             credential                                  proves
//	operator (zctl)    admin client certificate, or admin token    KindAdmin
//	arbiter replica    certificate, role arbiter                   KindArbiter
//	ssdnode            certificate, role node/<id>                 KindNode, Name = registered node id
//	tenant             namespace token (short-lived, signed)       KindNamespace, Name = namespace
//
// Every gRPC connection is TLS 1.3 (pkg/pki). Components (arbiter, nodes,
// etcd, the operator) hold certificates from the cluster CA that
// `zctl cert init` creates; the role is a URI SAN in the certificate and its
// common name (etcd maps the common name to its user). Tenants hold no
// certificate: they present a namespace token as "authorization: Bearer
// <token>" over a server-authenticated TLS connection. The admin token is a
// 32-byte random secret ("zfa_…") for scripts and zctl users without a
// client certificate; only arbiters accept it (nodes do not hold it), and it
// is never sent to a node.
//
// # Decision: signed namespace tokens for tenants, mTLS for components
//
// The two candidates for tenant identity were arbiter-issued short-lived
// signed tokens that nodes verify without a round trip (what SeaweedFS does
// with master-signed JWTs), and mTLS with the namespace in the client
// certificate. Tokens win for tenants; certificates for components:
//
//   - Revocation. A certificate stays valid until it expires unless every
//     node checks a CRL or OCSP responder, which Go's TLS stack does not do
//     and which would put a distribution problem on every node. A token lives
//     15 minutes (DefaultTokenTTL) and carries its namespace's token
//     generation: bumping the generation (`zctl token revoke NS`, the
//     arbiter's RevokeTokens; a key per namespace in etcd, package
//     tokengen) makes every node and arbiter refuse older tokens through
//     Config.Revoked as soon as its watch delivers the new generation.
//     Deleting a namespace raises its generation in the same etcd
//     transaction and deletes its grants: a namespace created again under
//     the same name accepts none of the previous incarnation's tokens.
//   - Expiry and skew. Tokens carry iat/exp in seconds; verifiers tolerate
//     DefaultSkew (30 s) of clock difference both ways and refuse lifetimes
//     above DefaultMaxTTL (24 h, for offline-minted tokens) even when
//     correctly signed. Certificates are backdated 5 minutes for the same
//     reason; pki.SecondsUntilExpiry gives a certificate's remaining life
//     (no process exports it as a metric yet, so the certificate-expiry
//     alerts have no series).
//   - Rotation. A tenant's client renews its token through the arbiter's
//     IssueToken in the background at 2/3 of its lifetime, with jitter
//     (pkg/client tokens.go); nothing reconnects. Signing
//     keys rotate by kid: publish the new public key next to the old one
//     (Verifier.SetKeys), switch the issuer, drop the old key after one
//     maximum lifetime. Certificates rotate by replacing files; pki.Reloader
//     serves them to new handshakes without a restart.
//   - What a stolen credential gives. A stolen token: one namespace's zones,
//     for at most 15 minutes, revocable sooner. A stolen tenant certificate
//     would give a year (the default certificate lifetime) with no
//     revocation. Tokens are never sent in clear (call credentials require
//     TLS; servers refuse plaintext connections unless started with an
//     explicit --insecure) and never sent to a non-node: node-to-node
//     calls carry no bearer token at all, only the node certificate. A
//     tenant can renew its own token (IssueToken), so a stolen token can be
//     kept alive by renewal until the operator revokes the generation.
//   - Who can mint. Ed25519, not HMAC-SHA256: with HMAC every verifying node
//     would hold the minting secret, so one compromised node could mint
//     tokens for every tenant. With Ed25519 nodes hold public keys only; the
//     private key lives on the arbiter (online issuance) and in the
//     `zctl cert init` directory (offline minting, bootstrap). The signing
//     key is also separate from the CA key: the CA key stays offline, so a
//     compromised arbiter can mint tenant tokens (it already assigns every
//     zone) but not node or admin certificates.
//   - Data-path cost. mTLS costs nothing per call; a token costs one
//     Ed25519 verification per token. The Verifier remembers verified tokens
//     in a bounded, sharded LRU keyed by the token's SHA-256, so a call pays
//     a hash and a map lookup and the expiry check. Measured with
//     go test -run XXX -bench . -count 5 ./pkg/auth/ on the shared 2-core
//     box (medians; absolute values inflated by other jobs, the ratio is
//     the figure): uncached verify 382 µs, cached 3.6 µs (~100x less), the
//     whole interceptor decision on a cached token 4.8 µs. Client
//     certificates get the same treatment: a verified chain is remembered
//     until it expires.
//   - Key distribution. The CA certificate and the token verification keys
//     are files (`zctl cert init` writes ca.crt and token-verify.pub),
//     reloaded on change. Each component gets only its own files
//     (ExportDir, `zctl cert export`; compose mounts one read-only volume
//     per component): a node holds ca.crt, its certificate and key and
//     token-verify.pub — never ca.key, the signing key or the admin token —
//     so a compromised node can neither issue itself an admin certificate
//     nor mint tenant tokens; only arbiters hold token-signing.key. Not
//     etcd: the trust anchors stay out of the shared store, so that no
//     etcd credential (not even the arbiter's) can replace them.
//   - Operability. Tokens and token files are what etcdctl and kubectl
//     users expect (--token-file, $ZONEFLEET_TOKEN, a config file); a
//     per-tenant certificate needs a CSR flow and per-tenant key files on
//     every FUSE host. One process (a gateway, the arbiter's compactor) can
//     act for several namespaces over one connection with tokens.
//
// Components use certificates because they need them anyway (every server
// presents one), their identities are few and long-lived, and a caller
// dialling a node needs the server to prove "I am node n2", which only a
// certificate can do before any byte of the call is sent.
//
// # Tokens
//
// Format (token.go): zf1.<kid>.<payload>.<sig>, payload = base64url JSON
// {role, sub, gen, iat, exp, jti}, sig = Ed25519 over "zf1.<kid>.<payload>",
// at most 1 KiB. Parsing is strict (unknown fields, trailing data, bad
// base64, lifetimes out of range are refused) and fuzzed. Roles:
// "namespace" (sub = namespace) and "node" (sub = node id, accepted only by
// --insecure servers, where nodes have no certificates) are credentials;
// "peer-read" and "peer-write" are operation grants (below), never
// credentials.
//
// Operation grants (peergrant.go): a node's certificate proves which node
// calls, not what it was asked to do. When the arbiter assigns a raid5 leg
// rebuild it signs a grant {role peer-read, sub = the rebuilding node, ns,
// zones = the survivors' node/device/zone}, valid PeerGrantTTL (15
// minutes), and sends it with RebuildParityLeg (metadata
// zonefleet-peer-grant); the rebuilding node forwards it on its PeerRead
// calls, and the serving node checks it against the caller's certificate,
// the request's namespace and zone (CheckPeerRead). A copy between nodes
// the arbiter assigns (reclaim, a mirror rebuild) carries a "peer-write"
// grant for the source node and the destination zone with ZoneCompaction;
// the source forwards it on PeerWrite and the destination checks each zone
// once per stream (CheckPeerWrite). A compaction a tenant asks for carries
// a grant too: before it, the tenant asks the arbiter (IssueToken with a
// peer_write scope: the source node, the destination zones) and the
// arbiter signs a "peer-write" grant for that node and those zones, marked
// delegated and carrying the namespace's token generation
// (DelegatePeerWrite); the tenant sends it with ZoneCompaction, the source
// forwards it, and the destination refuses it from any other node, for any
// other zone, and once the namespace's tokens are revoked. The tenant's
// token itself is never an authority for PeerWrite: every node a tenant
// calls sees it, so a node could otherwise write the tenant's zones on
// every other node. Without a grant PeerRead and PeerWrite are
// PERMISSION_DENIED, so a stolen node certificate neither reads nor writes
// tenants' data on other nodes.
//
// Issuance: Arbiter.IssueToken (pkg/arbiter tokens.go, `zctl token issue`)
// signs a token with the arbiter's token-signing.key, carrying the
// namespace's current generation (a linearizable etcd read). The policy
// admits the operator for any namespace (lifetime up to DefaultMaxTTL) and
// a tenant for its own only (a renewal, up to DefaultTokenTTL); a tenant
// whose presented token is of an older generation than etcd's is refused
// even if the watched table has not caught up, so a renewal cannot carry a
// revoked token into the new generation. Any arbiter replica answers (no
// arbiter state is involved). `zctl cert token` still mints offline with
// the signing key (bootstrap). Exchanger (a tenant trading a long-lived
// namespace credential "zfn_…" for a token, with failure rate limits) is
// for tenants without any token; it has no RPC.
//
// Issuance is rate-limited per caller identity (1 a second, bursts of 10,
// 50 a second over all callers; RESOURCE_EXHAUSTED past it), logged (INFO
// when issued, WARN when refused; never the token) and counted in
// zonefleet_arbiter_token_issuance_total{caller,outcome}.
//
// Revocation: Arbiter.RevokeTokens (admin, `zctl token revoke NS`) bumps the
// generation with a compare-and-swap in etcd (tokengen.Bump). A token is
// refused when its generation is below the namespace's current one. Offline
// tokens default to generation 0, so after a revocation or a re-creation
// `zctl cert token` needs --generation.
//
// Incarnations: DeleteNamespace raises the generation in the transaction
// that deletes the namespace, and the generation record outlives the
// namespace. Tokens are thereby bound to the incarnation they were issued
// for: after `ns delete` and a re-create under the same name, every node and
// arbiter refuses the old tokens (UNAUTHENTICATED, revoked) and IssueToken
// refuses to renew them (its linearizable generation check).
//
// # Server side
//
// Authenticator (server.go) runs first in every interceptor chain:
//
//  1. transport: plaintext is refused (UNAUTHENTICATED) unless Insecure.
//     A unix socket served with gRPC's local credentials (a node's
//     daemon.Config.UnixSocket, for clients on its host) counts as secure:
//     the kernel carries the bytes and the socket file is its owner's only.
//     It carries no certificate, so the caller needs a token there; local
//     credentials over TCP are still plaintext;
//  2. who: a client certificate is verified against the cluster CA
//     (pki.VerifyClient: chain, validity, client-auth usage; a verified chain
//     is remembered until it expires) and its role becomes the identity; a bearer token, if present, is verified
//     and takes precedence; exactly one authorization value is allowed;
//  3. for which namespace: a tenant's namespace is the token's; a
//     zonefleet-namespace metadata value that differs is PERMISSION_DENIED.
//     Admin, arbiter and node callers act for the namespace in that
//     metadata (the arbiter's compactor, a node's PeerWrite and PeerRead);
//  4. may it: the method's Rule (policy.go) lists the identity kinds
//     allowed; methods missing from the policy are denied to everyone; for
//     arbiter methods whose request names a namespace, non-admin callers
//     must act for exactly that namespace (ListVZones(victim) is refused);
//  5. what the handler sees: the Identity in the context (FromContext), the
//     zonefleet-namespace metadata replaced by the verified namespace, and
//     the authorization and legacy zonefleet-token metadata removed.
//
// Failures are *zerr.UnauthenticatedError (UNAUTHENTICATED) and
// *zerr.PermissionDeniedError (PERMISSION_DENIED), converted by pkg/rpcerr's
// table like every typed error, so clients get the same typed errors back.
// A refused call never reaches a handler.
//
// Audit: every refusal is classified once, where it is decided, into a
// fixed set of reasons (Refused* in audit.go: plaintext, certificate,
// no_credentials, token_expired, token_revoked, namespace_mismatch, policy,
// ...) and counted in zonefleet_auth_refusals_total{reason,method}; method
// is a method of the policy or "unknown", so callers cannot invent label
// values. The Authenticator is a prometheus.Collector its server registers.
// Refusals are logged at WARN through a token bucket (10 lines at once, then
// one a second); the next line written says how many were left out, so a
// flood of bad calls neither floods the log nor hides. Handlers that refuse
// a call themselves use Authenticator.Refused to be counted the same way.
//
// The per-zone question — does this namespace own this zone right now — is
// not the policy's: the node answers it from grants and the owner epoch.
//
// # Client side: a node is dialled by its id
//
// A node's address comes from its etcd record (through the arbiter's
// layouts or node list). The record is not trusted: every client of a node
// — pkg/client (library, mount), zctl, the arbiter's compactor, a node's
// peer pool — dials the node by id and accepts only a server whose
// verified certificate names node:<id> (NodeCredentials, pki
// ClientOptions.WantRole). A server presenting another identity (another
// node's stolen certificate, the arbiter's, anything of the cluster CA)
// fails the TLS handshake before any byte of a call is sent; the caller
// gets *zerr.PeerIdentityError naming the identity it wanted and the one it
// got, not an UNAVAILABLE to retry. A client on a node's host reaches it
// through the node's unix socket, chosen by node id, not by address.
//
// The admin token never goes to a node. Nodes do not hold it (their
// exported key directory has none) and cannot verify it; the operator's
// node calls (`zctl zone …`, Client.Device) are authorized by the admin
// client certificate. Only an --insecure cluster, which has no identities
// at all, still sends it.
//
// # etcd: least privilege
//
// etcd runs with client-certificate authentication and its own
// authentication and roles (package etcdrbac, applied by `zctl local up` at
// every start): a node's certificate writes only its own registration (under
// its lease) and reads the registrations, its own grants, the namespaces and
// the token generations; only arbiters write grants, layouts, namespaces,
// token generations and the election; the operator's certificate reads;
// tenants have no etcd credential. A stolen node certificate therefore
// cannot move another node's address, write a grant, touch the arbiter's
// state or lower a token generation.
//
// # Quotas by default
//
// A namespace without a capacity quota (`zctl ns create --vzones`) may hold
// at most a default share of the cluster's physical zones (arbiter
// --namespace-max-share, default one half): no tenant takes the last free
// zones from the others; past its share it gets RESOURCE_EXHAUSTED naming
// the share. A namespace with a quota has its zones reserved at creation
// and is bound by the quota instead.
//
// # Threats and how each is stopped
//
//	attack                                     stopped by                                               test
//	forged zonefleet-namespace metadata        namespace comes from the verified token; a mismatch     TestAttacks
//	                                           is PERMISSION_DENIED; handlers only see the verified
//	                                           value; without a token UNAUTHENTICATED
//	another tenant's token                     policy NamespaceField check; on nodes the grant check   TestAttacks
//	                                           uses the token's namespace
//	expired / not-yet-valid token              iat/exp with 30 s skew, also on verified-cache hits      TestAttacks, TestTokenRoundTripAndTimes
//	tampered token, forged kid, other key      Ed25519 over kid+payload; unknown kid refused; strict    TestAttacks, FuzzVerify
//	                                           parse after the signature
//	tenant calling admin RPCs                  per-method policy; deny by default; a test fails when   TestAttacks, TestPolicyCoversEveryMethod
//	                                           an API method has no rule
//	node record rewritten to another server    clients dial nodes by id and pin node:<id>; the          TestClientRefusesNodeUnderAnotherIdentity
//	(stolen node certificate)                  handshake fails, *zerr.PeerIdentityError; etcd lets a    TestEtcdLeastPrivilege
//	                                           node write only its own record
//	capturing the admin token at a node        never sent to nodes; operator node calls use the admin   TestAdminTokenNeverReachesANode
//	                                           certificate
//	stolen node certificate reading or         PeerRead / PeerWrite only with an arbiter-signed grant   TestPeerReadNeedsAnOperationGrant,
//	writing tenants' zones on other nodes      for that node, namespace and zone (for a tenant's        TestPeerWriteNeedsAuthority, TestPeerGrant,
//	                                           compaction: the grant the tenant asked for that node)    TestPeerWriteDelegation
//	a node replaying a tenant's token as       PeerWrite takes grants only; a tenant's grant names the  TestPeerWriteDelegation,
//	PeerWrite authority on other nodes         node and zones it asked for, dies with a revocation      TestPeerWriteNeedsAuthority
//	node certificate writing etcd (grants,     etcd authentication and roles (etcdrbac)                 TestEtcdLeastPrivilege
//	namespaces, un-revoking tokens)
//	tokens of a deleted, re-created namespace  generation raised with the deletion, record outlives     TestRecreatedNamespaceRefusesOldTokens
//	                                           it; renewal re-checks linearizably
//	one tenant taking every free zone          default share per namespace without a quota              TestDefaultShareLeavesZonesForOthers
//	minting tokens in a loop                   IssueToken rate limit per caller                         TestIssueTokenIsRateLimitedPerCaller
//	refusals leaving no trace                  zonefleet_auth_refusals_total, rate-limited WARN log     TestRefusalsAreCountedByReason, TestRefusalLogIsRateLimited
//	ZoneCompaction peer-address token theft    PeerWrite only for KindNode; nodes resolve the peer by   TestPeerDialNeverLeaksCredentials, peerdial tests
//	                                           id from the registered record and pin node:<id>;
//	                                           node-to-node calls carry no bearer token; the pool is
//	                                           bounded and keyed by node id
//	plaintext client vs TLS server             listeners are TLS-only; a server accidentally without    TestAttacks (plaintext), pki TestHandshakes
//	                                           TLS refuses every call UNAUTHENTICATED; call
//	                                           credentials refuse to send a token over plaintext
//	client certificate from another CA,        chain verified per call with the current time;          TestAttacks, pki TestHandshakes
//	expired client certificate                 etcd verifies at the handshake
//	weak, empty or well-known secrets          CheckSecret; New refuses a configuration in which        TestCheckSecret, TestNewRefusesWeakOrEmptyConfig
//	                                           nobody can authenticate
//	secrets in argv (ps)                       flags name files (0600, others refused); values only     TestLoadSecret
//	                                           from files or the environment
//	compromised node takes the CA key or the   each component gets only its own files (ExportDir,       TestExportLeastPrivilege, test/deploy
//	token signing key                          zctl cert export); ca.key never leaves the init volume
//	grant-miss amplification on etcd           limit.MissGuard: negative cache, per-namespace and       limit tests
//	                                           global token buckets before any etcd read
//	cross-tenant read after zone reassignment  owner epoch (below), checked on every zone-touching      zoneowner tests; node TestOwnerChange*
//	                                           call under the zone lock
//	revoked token renewing itself              generation watched; IssueToken re-checks it             TestAttacks "revoked token", tokengen tests
//	                                           linearizably
//	--insecure without credentials             refused at start; open access only with the explicit   daemon TestInsecureIsTransportOnly
//	                                           --insecure-open-access, logged at ERROR
//	unbounded per-client state                 bounded LRUs, labels, WRR queues, compaction table       limit tests, TestCompactionTableIsBounded
//
// # Residual risks
//
//   - Namespace tokens are bearer tokens, not bound to a sender: a node
//     that has seen a tenant's token (the tenant called it) can present it
//     as that tenant until it expires — to other nodes' data-path calls, or
//     to the arbiter to obtain a PeerWrite grant for itself. What it can no
//     longer do is use a token or a grant it was handed as PeerWrite
//     authority for another node or other zones. Closing the rest needs
//     sender-constrained tokens (a tenant key the token is bound to).
//   - The operator's certificate carries no PeerWrite authority, so
//     `zctl zone compact --peer` is refused on TLS clusters.
//   - A compromised node process reads what its own drives hold and sees
//     the namespace tokens of tenants that call it (for at most their
//     lifetime, 15 minutes by default).
//   - A compromised arbiter can mint tokens for any namespace and assign
//     any zone: it is the control plane.
//   - A stolen namespace token works until it expires or its generation is
//     bumped, and can renew itself until then.
//   - A RevokeTokens racing a namespace deletion can be overwritten by the
//     deletion's own raise of the generation; both refuse every token
//     issued before the deletion.
//   - The default share bounds each tenant, not their sum: enough tenants
//     without quotas can still fill the cluster; operators give quotas
//     (--vzones) where that matters.
//   - An --insecure cluster has no identities: anyone on the network is
//     whoever they claim, and the admin token travels in clear.
//   - The etcd certificate is etcd's root; it lives only with etcd and
//     with the tool that applies the roles.
//
// # Isolation: the owner epoch
//
// Resetting a zone "when its grant key is deleted" misses every owner
// change that is an overwrite (watch reconnect after an etcd leader change,
// the arbiter's grant repair, grants split over transactions). The node
// must compare state, not react to events:
//
//   - The arbiter writes an epoch into every grant value: the etcd revision
//     of the transaction that gave the zone to this namespace. A repair that
//     re-writes the same owner keeps the epoch; any new assignment, even to
//     the same namespace after a release, gets a new one.
//   - The node persists per zone (owner namespace, owner epoch) in an
//     owner file next to the device (pkg/zoneowner: format version, feature
//     bits, per-record CRC-32C, fdatasync before the first acknowledged I/O
//     of the new owner; an unreadable record forces a reset).
//   - Every zone-touching RPC (Read*, Write*, Append, ZoneManagement,
//     SimpleCopy, TLOpen, ZoneCompaction source and destinations, PeerWrite
//     destinations, PeerRead sources, RebuildParityLeg targets) goes through hold: under the zone's read lock it compares
//     the cached grant (namespace, epoch) with the persisted owner
//     (zoneowner.Decide). Equal: serve. Different: take the zone's write
//     lock, reset the zone, persist the new owner, then serve. No grant:
//     NOT_OWNER. Asynchronous work (ZoneCompaction) holds the zones until it
//     completes.
//   - After a watch break the grant cache is rebuilt from one consistent
//     Get before serving, and MissGuard.ForgetAll drops remembered misses.
//
// An overwrite the watch never delivered is still caught: the first call of
// the new owner sees an epoch the zone does not carry, and resets first.
//
// The epoch is the etcd create revision of the zone's grant key, not a
// field the arbiter writes. The arbiter creates the key
// when it gives the zone out and deletes it when it takes the zone back;
// its grant repair overwrites keys of zones it still gives out, which keeps
// the create revision, and a namespace change by overwrite is caught by the
// namespace comparison. Every writer of grants gets the property without a
// field to fill in. The owner file is
// DATA/devN.owners; a node whose owner file is new (an upgrade) seeds it
// from its grants before serving (Service.SeedOwners). ReportZones resets a
// stale zone before describing it (no previous write pointer leaks), and
// ZoneManagement of one zone is fenced like I/O. Tests: pkg/node
// TestOwnerChangeByOverwrite, TestOwnerChangeAcrossWatchBreakAndEtcdRestart
// (the node's etcd connection is cut, the grant deleted and re-created for
// another tenant, the history compacted and etcd restarted: the node never
// sees the deletion and still resets), TestOwnerChangeBeforeReportAndZoneManagement.
//
// # Where it lives
//
// pkg/daemon.LoadSecurity turns the trust flags (--pki-dir or
// --ca-file/--cert-file/--key-file, --token-verify-keys-file,
// --token-signing-key-file, --admin-token-file or $ZONEFLEET_ADMIN_TOKEN,
// --insecure) into a Bundle, the server TLS and the Authenticator, which
// daemon.New installs before the error table's interceptors and registers
// for metrics. Servers refuse to start without credentials unless
// --insecure (and then without a credential only with
// --insecure-open-access). The node decides admin calls and the namespace
// from the verified identity and resolves peers through peerdial; the
// arbiter serves IssueToken and RevokeTokens (pkg/arbiter tokens.go) and
// dials nodes pinned to node:<id> (NodeCompactor.WithNodeTLS). pkg/client
// takes Config.TLS, Config.Credentials (a TokenSource on every call) and
// Config.Token (the admin token, arbiter calls only), renews namespace
// tokens at 2/3 of their lifetime (tokens.go) and dials nodes by id. zctl
// has --ca-file/--cert-file/--key-file/--token-file/--insecure and their
// ZONEFLEET_* twins. `zctl local up` creates the PKI (InitDir) at the first
// start, serves TLS everywhere and applies the etcd roles; compose runs one
// export service per component into its own read-only volume (ExportDir,
// `zctl cert export`), so no long-running container holds the CA key or
// another component's key.
package auth
