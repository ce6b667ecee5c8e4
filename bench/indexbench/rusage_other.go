//go:build !unix

package indexbench

type usage struct {
	userNs, sysNs int64
	minFlt        int64
	nvcsw, nivcsw int64
}

func readUsage() usage { return usage{} }
