// Package cpuset provides parsing and formatting of Linux CPU lists such as
// "0-3,8,10-11" (the format of /sys/devices/system/cpu/online and of
// taskset -c), used to configure which CPUs kvroute's shard goroutines are
// pinned to.
package cpuset
