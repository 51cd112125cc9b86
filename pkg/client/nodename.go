package client

// NodeName names the node the error came from; lfs.NodeNamer uses it to say
// which node a stalled file system operation waits for.
func (e *NodeError) NodeName() string { return e.Node }
