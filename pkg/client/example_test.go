package client_test

import (
	"bytes"
	"context"
	"fmt"
	"os"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
)

// A program that writes and reads a v-zone. Against a running cluster, use
// the addresses of its arbiters (for `zctl local up`: DIR/cluster.json).
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "zonefleet-example-")
	defer os.RemoveAll(dir)
	cluster, err := localcluster.Start(ctx, localcluster.Config{Dir: dir, Nodes: 2, Clock: "off", Device: localcluster.TinyDevice()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()

	// An administrator creates a namespace...
	admin, err := client.New(ctx, cluster.AdminClientConfig()) // TLS, admin certificate
	if err != nil {
		fmt.Println(err)
		return
	}
	defer admin.Close()
	if _, err := admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "tenant-a", MaxActiveVzones: 2, ZonesPerVzone: 8}); err != nil {
		fmt.Println(err)
		return
	}

	// ...and a tenant writes to a v-zone and reads it back.
	c, err := client.New(ctx, cluster.ClientConfig("tenant-a")) // TLS, namespace token
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	vz, err := c.OpenVZone(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	data := bytes.Repeat([]byte("zoned!!\n"), 4096) // 32 KiB = 8 blocks
	off, err := vz.Append(ctx, data)
	if err != nil {
		fmt.Println(err)
		return
	}
	got, err := vz.Read(ctx, off, 8)
	if err != nil {
		fmt.Println(err)
		return
	}
	info, _ := vz.ReportZone(ctx)
	fmt.Printf("appended 8 blocks at %d; write pointer %d; read back equal: %v\n", off, info.WritePointer, bytes.Equal(data, got))
	// Output: appended 8 blocks at 0; write pointer 8; read back equal: true
}
