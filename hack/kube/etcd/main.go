// Command etcd is the upstream etcd server: it only hands its arguments to etcdmain, so the
// binary behaves exactly like a released etcd of the version pinned in go.mod.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
