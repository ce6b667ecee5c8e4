package promtext

import (
	"io"

	"github.com/VictoriaMetrics/metrics"
)

// WriteProcess writes the Go runtime and process metrics of
// metrics.WriteProcessMetrics (go_*, process_*; samples only, ProcessFamilies
// holds their metadata). Some process_* families exist only on Linux.
func WriteProcess(w io.Writer) { metrics.WriteProcessMetrics(w) }

// ProcessFamilies describes what WriteProcess writes (VictoriaMetrics/metrics
// v1.35). Three names are changed to pass promtool's lint: the counters
// go_cgo_calls_count and go_gc_forced_count become go_cgo_calls_total and
// go_gc_forced_total, and the gauge go_cpu_count becomes go_cpus; the
// process_io_* counters, which the library writes as gauges, are typed
// counter.
var ProcessFamilies = []Family{
	{Name: "go_sched_latencies_seconds", Type: Histogram, Help: "Time goroutines spent runnable before running (Go runtime /sched/latencies; buckets up to 1 s, no _sum or _count)"},
	{Name: "go_mutex_wait_seconds_total", Type: Counter, Help: "Time goroutines spent blocked on a sync.Mutex or sync.RWMutex"},
	{Name: "go_gc_mark_assist_cpu_seconds_total", Type: Counter, Help: "CPU time goroutines spent assisting the garbage collector"},
	{Name: "go_gc_cpu_seconds_total", Type: Counter, Help: "CPU time spent in the garbage collector"},
	{Name: "go_gc_pauses_seconds", Type: Histogram, Help: "Stop-the-world garbage collection pauses (Go runtime /gc/pauses; buckets up to 1 s, no _sum or _count)"},
	{Name: "go_scavenge_cpu_seconds_total", Type: Counter, Help: "CPU time spent returning memory to the operating system"},
	{Name: "go_memlimit_bytes", Type: Gauge, Help: "The Go memory limit (GOMEMLIMIT)"},
	{Name: "go_memstats_alloc_bytes", Type: Gauge, Help: "Bytes of allocated heap objects"},
	{Name: "go_memstats_alloc_bytes_total", Type: Counter, Help: "Bytes allocated for heap objects, cumulative"},
	{Name: "go_memstats_buck_hash_sys_bytes", Type: Gauge, Help: "Bytes of memory in profiling bucket hash tables"},
	{Name: "go_memstats_frees_total", Type: Counter, Help: "Heap objects freed"},
	{Name: "go_memstats_gc_cpu_fraction", Type: Gauge, Help: "Fraction of the available CPU time used by the garbage collector since the program started"},
	{Name: "go_memstats_gc_sys_bytes", Type: Gauge, Help: "Bytes of memory in garbage collection metadata"},
	{Name: "go_memstats_heap_alloc_bytes", Type: Gauge, Help: "Bytes of allocated heap objects"},
	{Name: "go_memstats_heap_idle_bytes", Type: Gauge, Help: "Bytes in idle (unused) heap spans"},
	{Name: "go_memstats_heap_inuse_bytes", Type: Gauge, Help: "Bytes in in-use heap spans"},
	{Name: "go_memstats_heap_objects", Type: Gauge, Help: "Allocated heap objects"},
	{Name: "go_memstats_heap_released_bytes", Type: Gauge, Help: "Bytes of physical memory returned to the operating system"},
	{Name: "go_memstats_heap_sys_bytes", Type: Gauge, Help: "Bytes of heap memory obtained from the operating system"},
	{Name: "go_memstats_last_gc_time_seconds", Type: Gauge, Help: "Unix time of the last garbage collection"},
	{Name: "go_memstats_lookups_total", Type: Counter, Help: "Pointer lookups performed by the runtime"},
	{Name: "go_memstats_mallocs_total", Type: Counter, Help: "Heap objects allocated"},
	{Name: "go_memstats_mcache_inuse_bytes", Type: Gauge, Help: "Bytes of allocated mcache structures"},
	{Name: "go_memstats_mcache_sys_bytes", Type: Gauge, Help: "Bytes of memory obtained from the operating system for mcache structures"},
	{Name: "go_memstats_mspan_inuse_bytes", Type: Gauge, Help: "Bytes of allocated mspan structures"},
	{Name: "go_memstats_mspan_sys_bytes", Type: Gauge, Help: "Bytes of memory obtained from the operating system for mspan structures"},
	{Name: "go_memstats_next_gc_bytes", Type: Gauge, Help: "Heap size at which the next garbage collection starts"},
	{Name: "go_memstats_other_sys_bytes", Type: Gauge, Help: "Bytes of memory in miscellaneous off-heap runtime allocations"},
	{Name: "go_memstats_stack_inuse_bytes", Type: Gauge, Help: "Bytes in stack spans"},
	{Name: "go_memstats_stack_sys_bytes", Type: Gauge, Help: "Bytes of stack memory obtained from the operating system"},
	{Name: "go_memstats_sys_bytes", Type: Gauge, Help: "Bytes of memory obtained from the operating system"},
	{Name: "go_cgo_calls_total", Alias: "go_cgo_calls_count", Type: Counter, Help: "Cgo calls made by the process"},
	{Name: "go_cpus", Alias: "go_cpu_count", Type: Gauge, Help: "Logical CPUs usable by the process (runtime.NumCPU)"},
	{Name: "go_gc_duration_seconds", Type: Summary, Help: "Quantiles of the last 256 garbage collection pauses"},
	{Name: "go_gc_forced_total", Alias: "go_gc_forced_count", Type: Counter, Help: "Garbage collections forced by the application calling runtime.GC"},
	{Name: "go_gomaxprocs", Type: Gauge, Help: "GOMAXPROCS: the number of OS threads that can run Go code at once"},
	{Name: "go_goroutines", Type: Gauge, Help: "Goroutines that currently exist"},
	{Name: "go_threads", Type: Gauge, Help: "OS threads created"},
	{Name: "go_info", Type: Gauge, Help: "Always 1; the version label is the Go version the binary was built with"},
	{Name: "go_info_ext", Type: Gauge, Help: "Always 1; the labels are the Go compiler, GOARCH, GOOS and GOROOT"},
	{Name: "process_cpu_seconds_system_total", Type: Counter, Help: "CPU time spent in the kernel on behalf of the process"},
	{Name: "process_cpu_seconds_total", Type: Counter, Help: "CPU time spent by the process, user plus system"},
	{Name: "process_cpu_seconds_user_total", Type: Counter, Help: "CPU time spent by the process in user space"},
	{Name: "process_major_pagefaults_total", Type: Counter, Help: "Page faults that needed disk I/O"},
	{Name: "process_minor_pagefaults_total", Type: Counter, Help: "Page faults served without disk I/O"},
	{Name: "process_num_threads", Type: Gauge, Help: "OS threads of the process"},
	{Name: "process_resident_memory_bytes", Type: Gauge, Help: "Resident set size"},
	{Name: "process_start_time_seconds", Type: Gauge, Help: "Unix time the process started"},
	{Name: "process_virtual_memory_bytes", Type: Gauge, Help: "Virtual memory size"},
	{Name: "process_virtual_memory_peak_bytes", Type: Gauge, Help: "Peak virtual memory size"},
	{Name: "process_resident_memory_peak_bytes", Type: Gauge, Help: "Peak resident set size"},
	{Name: "process_resident_memory_anon_bytes", Type: Gauge, Help: "Resident anonymous memory"},
	{Name: "process_resident_memory_file_bytes", Type: Gauge, Help: "Resident file-backed memory"},
	{Name: "process_resident_memory_shared_bytes", Type: Gauge, Help: "Resident shared memory"},
	{Name: "process_io_read_bytes_total", Type: Counter, Help: "Bytes read by the process (read syscalls, including the page cache)"},
	{Name: "process_io_written_bytes_total", Type: Counter, Help: "Bytes written by the process (write syscalls, including the page cache)"},
	{Name: "process_io_read_syscalls_total", Type: Counter, Help: "Read syscalls made by the process"},
	{Name: "process_io_write_syscalls_total", Type: Counter, Help: "Write syscalls made by the process"},
	{Name: "process_io_storage_read_bytes_total", Type: Counter, Help: "Bytes the process caused to be read from storage"},
	{Name: "process_io_storage_written_bytes_total", Type: Counter, Help: "Bytes the process caused to be written to storage"},
	{Name: "process_max_fds", Type: Gauge, Help: "Limit on open file descriptors"},
	{Name: "process_open_fds", Type: Gauge, Help: "Open file descriptors"},
}
