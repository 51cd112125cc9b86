package auth

import (
	"slices"
)

// Rule says who may call one gRPC method.
type Rule struct {
	// Public methods need no credentials (health checks only).
	Public bool
	// Kinds may call the method.
	Kinds []Kind
	// NamespaceField names the string field of a unary request that holds
	// the namespace the call is about ("namespace", or "name" for
	// GetNamespace). Callers other than admin must act for exactly that
	// namespace: a tenant asking ListVZones for another tenant is denied
	// before the handler runs.
	NamespaceField string
}

// Policy maps full gRPC method names ("/zonefleet.v1.Arbiter/CreateNamespace")
// to rules. A method missing from the policy is denied to everyone: a new
// RPC cannot ship without a decision (TestPolicyCoversEveryMethod).
type Policy map[string]Rule

func (p Policy) allows(method string, k Kind) (Rule, bool) {
	r, ok := p[method]
	if !ok {
		return Rule{}, false
	}
	return r, r.Public || slices.Contains(r.Kinds, k)
}

var (
	tenantData = []Kind{KindAdmin, KindNamespace}
	// nodeData: the data path of a node. The arbiter's compactor copies
	// between two devices of one node by Read + Write for a namespace (it
	// assigns every zone anyway, see the residual risks in doc.go).
	nodeData     = []Kind{KindAdmin, KindArbiter, KindNamespace}
	tenantCtl    = []Kind{KindAdmin, KindArbiter, KindNamespace}
	anyComponent = []Kind{KindAdmin, KindArbiter, KindNode, KindNamespace}
)

// DefaultPolicy is the access table of the ZonedDevice and Arbiter services.
//
//	ZonedDevice
//	  Identify, IdentifyMapping            anyone authenticated
//	  ReportZones, ZoneManagement,
//	  ZoneCompaction, WaitCompaction       admin, arbiter (for a namespace), tenant
//	  Read, ReadStream, ReadV, Write, WriteStream,
//	  Append, Flush, SimpleCopy, TLOpen    admin, tenant (the arbiter is never on the byte path)
//	  GetLog                               admin
//	  PeerWrite, PeerRead                  node only (never the admin token);
//	                                       PeerRead serves a peer's raid5 rebuild
//	  RebuildParityLeg                     admin, arbiter (the target node then
//	                                       pulls from its peers with PeerRead)
//	FDP
//	  Write, Read, Trim, Flush, LBAStatus,
//	  Configs                              admin, tenant (the handler admits a tenant
//	                                       to its fdp namespace's grant only; Configs
//	                                       shows it its namespace's view)
//	  other log pages, UpdateHandles,
//	  SetConfig                            admin
//	Arbiter
//	  Create/Update/Delete/ListNamespaces  admin
//	  RemoveNode                           admin (an operator forgets a dead node)
//	  IssueToken                           admin, tenant (renews its own namespace's token,
//	                                       or asks a PeerWrite grant for its compaction)
//	  RevokeTokens                         admin
//	  GetNamespace                         admin, tenant (own namespace, field name)
//	  v-zone calls, ReportActivity,
//	  AcquireMount, ReleaseMount           admin, tenant (own namespace, field namespace)
//	  ListNodes, GetNode, ClusterStatus    admin, tenant (topology and geometry the
//	                                       FUSE mount needs; the arbiter must redact
//	                                       other tenants' names from ClusterStatus)
//
// Per-zone ownership stays with the handlers (grants + owner epoch); the
// policy only decides who may call what.
func DefaultPolicy() Policy {
	const dev = "/zonefleet.v1.ZonedDevice/"
	const arb = "/zonefleet.v1.Arbiter/"
	const fdp = "/zonefleet.v1.FDP/"
	p := Policy{
		dev + "Identify":        {Kinds: anyComponent},
		dev + "IdentifyMapping": {Kinds: anyComponent},
		dev + "ReportZones":     {Kinds: tenantCtl},
		dev + "ZoneManagement":  {Kinds: tenantCtl},
		dev + "ZoneCompaction":  {Kinds: tenantCtl},
		dev + "WaitCompaction":  {Kinds: tenantCtl},
		dev + "Read":            {Kinds: tenantData},
		dev + "ReadStream":      {Kinds: tenantData},
		dev + "ReadV":           {Kinds: tenantData},
		dev + "Write":           {Kinds: tenantData},
		dev + "WriteStream":     {Kinds: tenantData},
		dev + "Append":          {Kinds: tenantData},
		dev + "Flush":           {Kinds: tenantData},
		dev + "SimpleCopy":      {Kinds: tenantData},
		dev + "TLOpen":          {Kinds: tenantData},
		dev + "GetLog":          {Kinds: []Kind{KindAdmin}},
		dev + "PeerWrite":       {Kinds: []Kind{KindNode}},
		dev + "PeerRead":        {Kinds: []Kind{KindNode}},
		// a raid5 leg rebuild is started by the arbiter (or the operator);
		// the bytes then move node to node (PeerRead)
		dev + "RebuildParityLeg": {Kinds: []Kind{KindAdmin, KindArbiter}},

		fdp + "Configs":       {Kinds: tenantData},
		fdp + "Usage":         {Kinds: []Kind{KindAdmin}},
		fdp + "Stats":         {Kinds: []Kind{KindAdmin}},
		fdp + "Events":        {Kinds: []Kind{KindAdmin}},
		fdp + "Status":        {Kinds: []Kind{KindAdmin}},
		fdp + "Write":         {Kinds: tenantData},
		fdp + "Read":          {Kinds: tenantData},
		fdp + "Trim":          {Kinds: tenantData},
		fdp + "LBAStatus":     {Kinds: tenantData},
		fdp + "Flush":         {Kinds: tenantData},
		fdp + "UpdateHandles": {Kinds: []Kind{KindAdmin}},
		fdp + "SetConfig":     {Kinds: []Kind{KindAdmin}},

		arb + "CreateNamespace": {Kinds: []Kind{KindAdmin}},
		arb + "DeleteNamespace": {Kinds: []Kind{KindAdmin}},
		arb + "UpdateNamespace": {Kinds: []Kind{KindAdmin}},
		arb + "ListNamespaces":  {Kinds: []Kind{KindAdmin}},
		arb + "GetNamespace":    {Kinds: tenantData, NamespaceField: "name"},
		arb + "OpenVZone":       {Kinds: tenantData, NamespaceField: "namespace"},
		arb + "NextStripeGroup": {Kinds: tenantData, NamespaceField: "namespace"},
		arb + "FinishVZone":     {Kinds: tenantData, NamespaceField: "namespace"},
		arb + "ResetVZone":      {Kinds: tenantData, NamespaceField: "namespace"},
		arb + "ResetVZones":     {Kinds: tenantData, NamespaceField: "namespace"},
		arb + "GetVZone":        {Kinds: tenantData, NamespaceField: "namespace"},
		arb + "ListVZones":      {Kinds: tenantData, NamespaceField: "namespace"},
		arb + "ReportActivity":  {Kinds: tenantData, NamespaceField: "namespace"},
		arb + "AcquireMount":    {Kinds: tenantData, NamespaceField: "namespace"},
		arb + "ReleaseMount":    {Kinds: tenantData, NamespaceField: "namespace"},
		arb + "ListNodes":       {Kinds: tenantData},
		arb + "GetNode":         {Kinds: tenantData},
		arb + "ClusterStatus":   {Kinds: tenantData},
		arb + "RemoveNode":      {Kinds: []Kind{KindAdmin}},
		arb + "TLOpenVZone":     {Kinds: tenantData, NamespaceField: "namespace"},
		arb + "IssueToken":      {Kinds: tenantData, NamespaceField: "namespace"},
		arb + "RevokeTokens":    {Kinds: []Kind{KindAdmin}},

		"/grpc.health.v1.Health/Check": {Public: true},
		"/grpc.health.v1.Health/Watch": {Public: true},
	}
	return p
}
