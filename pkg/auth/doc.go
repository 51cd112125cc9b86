// Package auth decides who is calling a ZoneFleet gRPC server and what that
// caller may do: it verifies credentials (client certificates through
// pkg/pki, signed namespace tokens, the admin token), puts a verified
// Identity in the call's context and enforces a per-method policy. It also
// holds the client side (per-RPC credentials, refreshing token sources) and
// the secret-handling rules. This comment is the design — tenants are
// proven, not claimed; "Wiring" at the end says where each part lives.
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
// `zctl cert init` creates; the role is a URI SAN in the certificate.
// Tenants hold no certificate: they present a namespace token as
// "authorization: Bearer <token>" over a server-authenticated TLS connection.
// The admin token is a 32-byte random secret ("zfa_…") for scripts and
// zctl users without a client certificate; it is accepted only over TLS.
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
//     Deleting a namespace also deletes its grants, so a not-yet-expired
//     token then reaches no zone.
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
//     etcd: every node has write access to etcd (it registers itself), so
//     a verification key published through etcd could be replaced by one
//     compromised node, which could then mint tokens for all tenants.
//     Files keep the trust anchors out of the shared store.
//   - Operability. Tokens and token files are what etcdctl and kubectl
//     users expect (--token-file, $ZONEFLEET_TOKEN, a config file); a
//     per-tenant certificate needs a CSR flow and per-tenant key files on
//     every FUSE host. One process (a gateway, the arbiter's compactor) can
//     act for several namespaces over one connection with tokens.
//
// Components use certificates because they need them anyway (every server
// presents one), their identities are few and long-lived, and the peer
// dialling fix below needs the server to prove "I am node n2", which only a
// certificate can do before any byte of the call is sent.
//
// # Tokens
//
// Format (token.go): zf1.<kid>.<payload>.<sig>, payload = base64url JSON
// {role, sub, gen, iat, exp, jti}, sig = Ed25519 over "zf1.<kid>.<payload>",
// at most 1 KiB. Parsing is strict (unknown fields, trailing data, bad
// base64, lifetimes out of range are refused) and fuzzed. Roles:
// "namespace" (sub = namespace) and "node" (sub = node id, accepted only by
// --insecure servers, where nodes have no certificates).
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
// the next step for tenants without any token; it is not wired to an RPC
// yet.
//
// Revocation: Arbiter.RevokeTokens (admin, `zctl token revoke NS`) bumps the
// generation with a compare-and-swap in etcd (tokengen.Bump). A token is
// refused when its generation is below the namespace's current one. Offline
// tokens default to generation 0, so after a revocation `zctl cert token`
// needs --generation.
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
// Failures are gRPC statuses UNAUTHENTICATED (with the ErrorInfo shape
// pkg/rpcerr gives zerr.UnauthenticatedError) or PERMISSION_DENIED
// (ErrorInfo reason PERMISSION_DENIED; PermissionDeniedError is the one
// error kind mapped outside pkg/rpcerr's table, see errors.go). A refused
// call never reaches a handler.
// Denials are logged at debug level only (a flood of bad calls must not
// flood the logs) and counted through Config.Observe with bounded labels.
//
// The per-zone question — does this namespace own this zone right now — is
// not the policy's: the node answers it from grants and the owner epoch.
//
// # Threats and how each is stopped
//
//	attack                                     stopped by                                               test
//	forged zonefleet-namespace metadata        namespace comes from the verified token; a mismatch     TestAttacks
//	                                           is PERMISSION_DENIED; handlers only see the verified
//	                                           value; without a token UNAUTHENTICATED
//	another tenant's token                     policy NamespaceField check (ListVZones/GetNamespace/    TestAttacks
//	                                           v-zone calls of the victim); on nodes the grant check
//	                                           uses the token's namespace
//	expired / not-yet-valid token              iat/exp with 30 s skew, also on verified-cache hits      TestAttacks, TestTokenRoundTripAndTimes
//	tampered token, forged kid, other key      Ed25519 over kid+payload; unknown kid refused; strict    TestAttacks, TestVerifyRejectsMalformed, FuzzVerify
//	                                           parse after the signature
//	tenant calling admin RPCs                  per-method policy; deny by default; a test fails when   TestAttacks, TestPolicyCoversEveryMethod
//	                                           an API method has no rule
//	ZoneCompaction peer-address token theft    PeerWrite only for KindNode (never the admin token);    TestPeerDialNeverLeaksCredentials, peerdial tests
//	                                           nodes resolve the peer from the registered node record
//	                                           by node id and ignore the request's address; the dial
//	                                           pins the server role node:<id> (pki WantRole), so a
//	                                           tenant's listener fails the TLS handshake before any
//	                                           call; node-to-node calls carry no bearer token; the
//	                                           peer connection pool is bounded and keyed by node id
//	plaintext client vs TLS server             listeners are TLS-only: the plaintext preface never      TestAttacks (plaintext subtest), pki TestHandshakes
//	                                           reaches gRPC (the client sees UNAVAILABLE, no handler
//	                                           runs); a server accidentally without TLS refuses every
//	                                           call UNAUTHENTICATED; call credentials refuse to send a
//	                                           token over plaintext
//	client certificate from another CA         chain verified per call → UNAUTHENTICATED; etcd uses     TestAttacks, pki TestHandshakes
//	                                           handshake-level verification (ClientCertRequire)
//	expired client certificate                 same, with the current time                              TestAttacks, pki TestHandshakes
//	unauthenticated arbiter (force delete)     the same interceptor on the arbiter; namespace CRUD is   TestAttacks
//	                                           admin only
//	weak, empty or well-known secrets          CheckSecret ("zonefleet", "local-*", < 32 bytes,          TestCheckSecret, TestNewRefusesWeakOrEmptyConfig
//	                                           < 128 bits estimated); New refuses a configuration in
//	                                           which nobody can authenticate (an empty token never
//	                                           makes everyone the operator)
//	secrets in argv (ps)                       flags name files (0600, others refused); values only     TestLoadSecret
//	                                           from files or the environment
//	compromised node takes the CA key or      each component gets only its own files (ExportDir,       TestExportLeastPrivilege, test/deploy
//	the token signing key                      zctl cert export; compose: one read-only volume per      TestComposeLeastPrivilegePKI,
//	                                           component); ca.key never leaves the init volume          TestComponentsHoldOnlyTheirOwnKeys
//	grant-miss amplification on etcd           identity first (a caller cannot invent namespaces);      limit tests
//	                                           limit.MissGuard: negative cache + per-
//	                                           namespace and global token buckets before any etcd read
//	cross-tenant read after zone reassignment  owner epoch (below), checked on every zone-touching      zoneowner tests; node TestOwnerChange*
//	                                           call under the zone lock                                 (watch break, compaction, etcd restart)
//	revoked token (also renewing itself)       token generation per namespace in etcd (tokengen),       TestAttacks "revoked token", tokengen tests
//	                                           watched; IssueToken re-checks it with a linearizable read
//	tenant issuing or revoking others' tokens  policy NamespaceField on IssueToken; RevokeTokens admin  TestAttacks
//	--insecure without credentials             refused at start; open access only with the explicit   daemon TestInsecureIsTransportOnly
//	                                           --insecure-open-access, logged at ERROR
//	unbounded per-client state                 bounded LRUs, labels, WRR queues, compaction table       limit tests, TestCompactionTableIsBounded
//
// Residual risks, accepted: a compromised arbiter can mint tokens for any
// namespace (it assigns every zone anyway); a compromised node can act for
// any namespace towards its peers' PeerWrite and PeerRead (peers still
// check the zones' grants: a node reads from a peer only zones granted to
// the namespace it names, as a raid5 rebuild does) and reads whatever its
// own drives hold; a
// stolen token works until it expires or its generation is bumped.
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
// As built (pkg/node): the epoch is the etcd create revision of the zone's
// grant key, not a field the arbiter writes. The arbiter creates the key
// when it gives the zone out and deletes it when it takes the zone back;
// its grant repair overwrites keys of zones it still gives out, which keeps
// the create revision, and a namespace change by overwrite is caught by the
// namespace comparison. So the grant format carries no epoch field and every
// writer of grants gets the property for free. The owner file is
// DATA/devN.owners; a node whose owner file is new (an upgrade) seeds it
// from its grants before serving (Service.SeedOwners). ReportZones resets a
// stale zone before describing it (no previous write pointer leaks), and
// ZoneManagement of one zone is fenced like I/O. Tests: pkg/node
// TestOwnerChangeByOverwrite, TestOwnerChangeAcrossWatchBreakAndEtcdRestart
// (the node's etcd connection is cut, the grant deleted and re-created for
// another tenant, the history compacted and etcd restarted: the node never
// sees the deletion and still resets), TestOwnerChangeBeforeReportAndZoneManagement.
//
// # Wiring
//
// pkg/daemon.LoadSecurity turns the
// trust flags (--pki-dir or --ca-file/--cert-file/--key-file,
// --token-verify-keys-file, --token-signing-key-file, --admin-token-file or
// $ZONEFLEET_ADMIN_TOKEN, --insecure) into a Bundle, ServerTLS and the
// Authenticator, installed by daemon.New before the error table's
// interceptors on every server (arbiter and ssdnode). Servers refuse to start
// without credentials unless --insecure, and with a weak admin token; there
// is no token value flag. Reflection is off on secure servers. Node: the
// verified identity decides admin calls (operator or arbiter) and the
// namespace (the metadata the handlers read is the verified one);
// ZoneCompaction dials peers through a peerdial.Pool resolving node ids from
// the etcd node records (TLS, node certificate, no token; on --insecure a
// node token minted with the signing key when present); PeerWrite only from
// nodes; SimpleCopy, TLOpen, ZoneCompaction (submission and each pushed
// chunk) and PeerWrite destinations go through the zone fencing; grant-cache
// misses pass a limit.MissGuard before the etcd read; WRR queues are dropped
// when idle and namespace metric labels are bounded. Arbiter: the same
// interceptor; the compactor dials nodes with the arbiter certificate
// (daemon.PeerDialOptions); ClusterStatus shows a tenant only its own
// namespace among the degraded ones. Client: Config.TLS, Config.Credentials
// (a TokenSource on every call), Config.Token (the admin token, on
// administrative calls only); client.Credentials loads them from files.
// zctl: --ca-file/--cert-file/--key-file/--token-file/--insecure, their
// ZONEFLEET_* twins, the config file's cluster entry, cluster.json.
// localcluster and `zctl local up`: InitDir into DATA/pki at the first start,
// TLS everywhere. Compose: a `pki` init service (zctl cert init
// --keep-existing) and TLS on gRPC.
//
// Tokens and revocation: Arbiter.IssueToken and RevokeTokens, tokengen tables watched by
// nodes and arbiters (daemon.Security.Generations, FollowTokenGenerations)
// and wired as Config.Revoked; etcd over TLS with client-certificate
// authentication in compose and in localcluster (`https://` endpoints select
// TLS, daemon.Security.EtcdClientTLS presents the component certificate,
// etcdlocal.ConnectWith); --insecure is transport only — a server with
// --insecure and no credential refuses to start unless
// --insecure-open-access is also given (then every caller is the operator,
// logged at ERROR); ZoneManagement through the fencing; the table of
// compactions not waited for is bounded.
//
// Least privilege per component:
// ExportDir / `zctl cert export` copy out of the init directory only what
// one component loads (etcd: ca.crt and its pair; arbiter: plus
// token-verify.pub and token-signing.key; node: plus token-verify.pub;
// admin: plus admin.token, for the operator), idempotently (unchanged files
// stay, a renewed certificate is copied, trust files the component must
// not hold are removed); compose runs one export service per component
// into its own volume, mounted read-only at /pki, and no long-running
// container mounts the init volume. Servers then hold no admin token: the
// operator uses the admin certificate. The client renews a namespace token
// by itself (pkg/client tokens.go): at 2/3 of its lifetime minus up to a
// tenth as jitter, through IssueToken presenting the current token, with
// jittered retries until expiry (WARN log and
// zonefleet_client_token_renewals_total{outcome}); a refusal (revoked,
// namespace gone) is final for that token and calls fail at once with
// UNAUTHENTICATED saying so; a changed token file (FileToken stats it
// every 5 s, re-reads on change) replaces the renewed token. PeekClaims
// reads a token's times for that schedule without verifying it.
//
// The Exchanger (namespace credentials, above) is not served by any RPC.
package auth
