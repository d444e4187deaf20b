// etcdctl, exactly as etcd's own main does it.
package main

import "go.etcd.io/etcd/etcdctl/v3/ctlv3"

func main() {
	ctlv3.MustStart()
}
