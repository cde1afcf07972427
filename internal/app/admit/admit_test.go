package admit

import (
	"context"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/memory"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// TestProcessMemoryFollowsTheProcess: the figure admission checks grows
// with memory the process takes and falls when the runtime hands memory
// back to the OS (unlike the total obtained from the OS, which never
// falls). Not parallel: no other test of this package allocates meanwhile.
func TestProcessMemoryFollowsTheProcess(t *testing.T) {
	const size = 256 << 20
	debug.FreeOSMemory()
	before := ProcessMemory()
	if before <= 0 {
		t.Fatalf("ProcessMemory() = %d before the allocation", before)
	}
	block := make([]byte, size)
	for i := 0; i < len(block); i += 4096 {
		block[i] = 1 // touch every page: resident, not just reserved
	}
	held := ProcessMemory()
	runtime.KeepAlive(block)
	if held-before < size*3/4 {
		t.Fatalf("ProcessMemory() grew by %d MiB after a %d MiB allocation (%d → %d)", (held-before)>>20, size>>20, before, held)
	}
	block = nil
	debug.FreeOSMemory() // collect and release to the OS at once, as the scavenger does over time
	after := ProcessMemory()
	if held-after < size/2 {
		t.Fatalf("ProcessMemory() fell by only %d MiB after %d MiB were freed and released (%d → %d)", (held-after)>>20, size>>20, held, after)
	}
	t.Logf("process memory: %d MiB, %d MiB with the block, %d MiB after releasing it", before>>20, held>>20, after>>20)
}

// BenchmarkProcessMemory is one reading of the runtime's memory classes.
func BenchmarkProcessMemory(b *testing.B) {
	for b.Loop() {
		if ProcessMemory() <= 0 {
			b.Fatal("no reading")
		}
	}
}

// BenchmarkAdmissionCheck is what every job pays for the memory check with
// the default sampling (one reading per 250ms, reused in between).
func BenchmarkAdmissionCheck(b *testing.B) {
	a := New(Config{MemoryLimitMB: 1 << 20}, memory.New(nil), ports.SystemClock{})
	ctx := context.Background()
	for b.Loop() {
		if rej := a.Check(ctx); rej != nil {
			b.Fatal(rej)
		}
	}
}

// BenchmarkAdmissionCheckUnsampled reads memory on every check, as a
// SampleEvery of zero-ish would: the cost the sampling saves.
func BenchmarkAdmissionCheckUnsampled(b *testing.B) {
	a := New(Config{MemoryLimitMB: 1 << 20, SampleEvery: 1}, memory.New(nil), ports.SystemClock{})
	ctx := context.Background()
	for b.Loop() {
		if rej := a.Check(ctx); rej != nil {
			b.Fatal(rej)
		}
	}
}
