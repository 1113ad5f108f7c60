//go:build linux

package interop

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// NVMe over Fabrics on RDMA against the kernel, both roles (docs/nvmeof.md):
// the VM's stock nvme-rdma host (nvme-cli) mounts ext4 from `goroce nvmet`,
// and `goroce nvme io` writes and verifies through the VM's nvmet-rdma
// target (configfs, a loop device over a file).

const (
	nvmeHostNQN = "nqn.2014-08.org.nvmexpress:uuid:6d8a4b7e-0c1f-4e55-9a7e-2b9f1c3d4e5f"
	nvmeHostID  = "6d8a4b7e-0c1f-4e55-9a7e-2b9f1c3d4e5f"
	// nvmeDataMiB is the random data each direction writes and verifies,
	// as the issue asks (GOROCE_NVME_MIB overrides), and the data checked
	// again under 2 % netem loss.
	nvmeDataMiB = 64
)

func nvmeMiB() int {
	if v := os.Getenv("GOROCE_NVME_MIB"); v != "" {
		var n int
		fmt.Sscan(v, &n)
		if n > 0 {
			return n
		}
	}
	return nvmeDataMiB
}

func TestNVMeoF(t *testing.T) {
	h := New(t, Config{VMs: 1})
	bin := buildGoroce(t)
	mib := nvmeMiB()
	diskMiB := max(64, mib+8)

	t.Run("KernelHostGoroceTarget", func(t *testing.T) {
		nqn := "nqn.2026-12.io.goroce:interop-target"
		disk := filepath.Join(t.TempDir(), "disk")
		p, err := h.HostStart(bin, "nvmet", "-d", h.HostIface(), "-a", h.HostIP().String(), "--nqn", nqn,
			"--file", disk, "--size", fmt.Sprintf("%dM", diskMiB), "-v")
		if err != nil {
			t.Fatal(err)
		}
		defer p.Kill()
		defer func() {
			if t.Failed() {
				t.Logf("goroce nvmet's output:\n%s", p.Output())
			}
		}()
		waitOutput(t, p, "nvmet: listening on", 30*time.Second)
		target := fmt.Sprintf("-t rdma -a %v -s 4420 --hostnqn %s --hostid %s", h.HostIP(), nvmeHostNQN, nvmeHostID)

		r := h.Run(0, "nvme discover "+target, 2*time.Minute).Check(t)
		if !strings.Contains(r.Stdout, "subnqn:  "+nqn) {
			t.Fatalf("nvme discover does not list %s:\n%s", nqn, r)
		}
		t.Logf("nvme discover:\n%s", r.Stdout)

		h.Run(0, "nvme connect "+target+" -n "+nqn, 2*time.Minute).Check(t)
		// A failure below must not leave the kernel host connected (its
		// queues would keep goroce's QPNs in use for the next subtest).
		defer h.Run(0, "nvme disconnect-all", time.Minute)
		r = h.Run(0, "for i in $(seq 100); do [ -b /dev/nvme0n1 ] && break; sleep 0.2; done; cat /sys/block/nvme0n1/size", time.Minute).Check(t)
		var sectors int64
		fmt.Sscan(r.Stdout, &sectors)
		if sectors*512 != int64(diskMiB)<<20 {
			t.Fatalf("/dev/nvme0n1 has %d sectors, want %d bytes", sectors, diskMiB<<20)
		}

		// Random data with O_DIRECT, read back, and the same bytes in the
		// target's backing file.
		start := time.Now()
		r = h.Run(0, fmt.Sprintf(`set -e
dd if=/dev/urandom of=/tmp/data bs=1M count=%d 2>/dev/null
dd if=/tmp/data of=/dev/nvme0n1 bs=1M oflag=direct 2>&1 | tail -1
sha256sum < /tmp/data
dd if=/dev/nvme0n1 bs=1M count=%d iflag=direct 2>/dev/null | sha256sum`, mib, mib), 10*time.Minute).Check(t)
		sums := regexp.MustCompile(`(?m)^([0-9a-f]{64})`).FindAllStringSubmatch(r.Stdout, -1)
		if len(sums) != 2 || sums[0][1] != sums[1][1] {
			t.Fatalf("written and read-back SHA-256 differ:\n%s", r)
		}
		t.Logf("%d MiB written with dd oflag=direct and read back in %v: sha256 %s", mib, time.Since(start).Round(time.Second), sums[0][1])
		if got := fileSHA(t, disk, mib<<20); got != sums[0][1] {
			t.Fatalf("the target's backing file holds sha256 %s, the host wrote %s", got, sums[0][1])
		}

		// A resize: the backing file grows, SIGHUP makes goroce nvmet serve
		// it and send the namespace attribute notice; the kernel host
		// rescans and /dev/nvme0n1 grows.
		grown := int64(diskMiB+8) << 20
		if err := os.Truncate(disk, grown); err != nil {
			t.Fatal(err)
		}
		p.Cmd.Process.Signal(syscall.SIGHUP)
		r = h.Run(0, fmt.Sprintf(`for i in $(seq 150); do [ "$(cat /sys/block/nvme0n1/size)" = %d ] && break; sleep 0.2; done
cat /sys/block/nvme0n1/size; dmesg | grep -i 'rescanning\|capacity change' | tail -2`, grown/512), time.Minute).Check(t)
		if fmt.Sscan(r.Stdout, &sectors); sectors*512 != grown {
			t.Fatalf("after the resize to %d bytes and its notice, /dev/nvme0n1 has %d sectors:\n%s\ngoroce nvmet: %s", grown, sectors, r, p.Output())
		}
		t.Logf("resize by SIGHUP: the kernel host took the notice: %s", strings.TrimSpace(r.Stdout))

		// A file system: mkfs, mount, copy, unmount, e2fsck clean.
		start = time.Now()
		r = h.Run(0, `set -e
mkfs.ext4 -q -F /dev/nvme0n1
mkdir -p /mnt/n
trap 'umount /mnt/n 2>/dev/null || true' EXIT
mount -t ext4 /dev/nvme0n1 /mnt/n
cp -a /usr/lib/x86_64-linux-gnu /mnt/n/lib
dd if=/tmp/data of=/mnt/n/data bs=1M count=4 2>/dev/null
(cd /usr/lib/x86_64-linux-gnu && find . -type f | sort | xargs sha256sum) > /tmp/a
umount /mnt/n
mount -t ext4 /dev/nvme0n1 /mnt/n
(cd /mnt/n/lib && find . -type f | sort | xargs sha256sum) > /tmp/b
cmp /tmp/a /tmp/b
dd if=/tmp/data bs=1M count=4 2>/dev/null | cmp - /mnt/n/data
echo files=$(wc -l < /tmp/a)
umount /mnt/n
e2fsck -fn /dev/nvme0n1`, 10*time.Minute).Check(t)
		t.Logf("ext4 (%v): %s", time.Since(start).Round(time.Second), strings.TrimSpace(r.Stdout))

		// Loss on the VM's link: the same 64 MiB data check through the
		// kernel host's retransmissions, one command at a time (bs = goroce's
		// MDTS, 128 KiB). With bs=1M the host has eight commands in flight,
		// each a REG_MR and a SEND on its send queue, and every retransmission
		// of a SEND that passes a queued REG_MR stalls the queue until the
		// 30 s I/O timeout: a Linux 6.1 rxe requester bug that stalls the
		// stock target the same way (docs/nvmeof.md, docs/interop.md's known
		// rxe quirks, TestNVMeoFRxeControl); 64 MiB that way did not finish
		// in 10 min. The log keeps the rxe lines (`rxe_reg_fast_mr: ... not
		// free`) that would mark such a stall.
		lossMiB := mib
		ctrls := strings.Count(p.Output(), "created controller")
		if dir := os.Getenv("GOROCE_NVME_PCAP"); dir != "" {
			c, err := h.Capture(filepath.Join(dir, "nvme-loss.pcap"), "udp port 4791")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Stop()
		}
		start = time.Now()
		r = h.Run(0, fmt.Sprintf(`set -e
dmesg -c > /dev/null
tc qdisc add dev eth0 root netem loss 2%%
trap 'tc qdisc del dev eth0 root; dmesg | grep -iE "nvme|rxe" | tail -30 >&2' EXIT
dd if=/dev/urandom of=/tmp/data2 bs=1M count=%d 2>/dev/null
dd if=/tmp/data2 of=/dev/nvme0n1 bs=128K seek=8 oflag=direct 2>/dev/null
sha256sum < /tmp/data2
dd if=/dev/nvme0n1 bs=128K skip=8 count=%d iflag=direct 2>/dev/null | sha256sum`, lossMiB, lossMiB*8), 10*time.Minute).Check(t)
		sums = regexp.MustCompile(`(?m)^([0-9a-f]{64})`).FindAllStringSubmatch(r.Stdout, -1)
		if len(sums) != 2 || sums[0][1] != sums[1][1] {
			t.Fatalf("with 2%% loss, written and read-back SHA-256 differ:\n%s", r)
		}
		t.Logf("with netem loss 2%%: %d MiB written with dd bs=128K oflag=direct and read back in %v; the kernel host reconnected %d times; its log:\n%s",
			lossMiB, time.Since(start).Round(time.Second), strings.Count(p.Output(), "created controller")-ctrls, r.Stderr)

		r = h.Run(0, "nvme disconnect -n "+nqn, time.Minute).Check(t)
		if !strings.Contains(r.Stdout, "disconnected 1 controller") {
			t.Fatalf("nvme disconnect:\n%s", r)
		}
		p.Cmd.Process.Signal(os.Interrupt)
		res := p.Wait(30 * time.Second)
		if res.ExitCode != 0 || res.Err != nil {
			t.Fatalf("goroce nvmet after SIGINT: %v exit %d\n%s", res.Err, res.ExitCode, p.Output())
		}
		t.Logf("goroce nvmet: %s", lastLine(p.Output()))
	})

	t.Run("GoroceHostKernelTarget", func(t *testing.T) {
		nqn := "nqn.2026-12.io.goroce:interop-kernel"
		vm := h.VMIP(0)
		h.Run(0, "set -e\ntc qdisc del dev eth0 root 2>/dev/null || true # the loss check's, if it was killed\n"+
			nvmetScript(diskMiB, nqn, vm, nvmetInline), time.Minute).Check(t)

		ents := h.HostExec(bin, "nvme", "discover", "-d", h.HostIface(), "-a", vm.String())
		out, err := ents.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "subnqn:  "+nqn) {
			t.Fatalf("goroce nvme discover against nvmet-rdma: %v\n%s", err, out)
		}
		// verify runs goroce nvme io against the kernel target and checks the
		// SHA-256 of the VM's backing file region; it returns the
		// host's stderr (its in-capsule counts).
		verify := func(offMiB, sizeMiB int, extra ...string) string {
			t.Helper()
			start := time.Now()
			c := h.HostExec(bin, append([]string{"nvme", "io", "-d", h.HostIface(), "-a", vm.String(), "--nqn", nqn,
				"--write-verify", fmt.Sprintf("%dM", sizeMiB), "--offset", fmt.Sprintf("%dM", offMiB), "--qd", "8", "--queues", "2", "--seed", "22"}, extra...)...)
			var stdout, stderr strings.Builder
			c.Stdout, c.Stderr = &stdout, &stderr
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			kill := time.AfterFunc(5*time.Minute, func() { c.Process.Kill() }) // a bound, not a timing check
			err := c.Wait()
			kill.Stop()
			if err != nil {
				t.Fatalf("goroce nvme io against nvmet-rdma: %v\n%s%s", err, stdout.String(), stderr.String())
			}
			m := regexp.MustCompile(`^sha256=([0-9a-f]{64}) bytes=(\d+)\n$`).FindStringSubmatch(stdout.String())
			if m == nil || m[2] != fmt.Sprint(sizeMiB<<20) {
				t.Fatalf("goroce nvme io printed %q", stdout.String())
			}
			t.Logf("goroce nvme io %v: %s (%v): %s", extra, strings.TrimSpace(stdout.String()), time.Since(start).Round(time.Second), strings.TrimSpace(stderr.String()))
			r := h.Run(0, fmt.Sprintf("sync /tmp/kdisk; dd if=/tmp/kdisk bs=1M skip=%d count=%d 2>/dev/null | sha256sum", offMiB, sizeMiB), 5*time.Minute).Check(t)
			if !strings.HasPrefix(r.Stdout, m[1]) {
				t.Fatalf("the VM's backing file region has %q, goroce wrote %s", r.Stdout, m[1])
			}
			return stderr.String()
		}
		// 128 KiB commands (keyed SGLs: nvmet RDMA READs the writes).
		verify(1, mib)
		// In-capsule writes: nvmetScript set the port's
		// param_inline_data_size to nvmetInline, so nvmet's Identify says
		// IOCCSZ = (64 + 8192) / 16 and SGLS bit 20, and the host sends
		// every 8 KiB write (and each I/O queue's Connect) in the SEND
		// after the SQE: 4 MiB / 8 KiB = 512 writes, 2 Connects, and the
		// 512 reads keyed.
		if diskMiB < 1+mib+4 {
			t.Fatalf("disk of %d MiB too small for the in-capsule check", diskMiB)
		}
		stderr := verify(1+mib, 4, "--bs", "8k")
		want := fmt.Sprintf("in-capsule data up to %d bytes: %d commands with in-capsule data, %d with keyed SGLs", nvmetInline, 512+2, 512)
		if !strings.Contains(stderr, want) {
			t.Fatalf("goroce nvme io --bs 8k against nvmet with param_inline_data_size %d: no %q in\n%s", nvmetInline, want, stderr)
		}
	})
}

// nvmetInline is the in-capsule data size GoroceHostKernelTarget gives the
// kernel target's port (configfs param_inline_data_size; nvmet-rdma's
// default is PAGE_SIZE, its maximum 16 KiB).
const nvmetInline = 8192

// nvmetScript is the shell that exports a loop device over a diskMiB file
// as namespace 1 of subsystem nqn on an nvmet-rdma port at addr:4420
// (configfs, as nvmetcli would), with the port's in-capsule data size
// (param_inline_data_size) set to inline unless it is 0.
func nvmetScript(diskMiB int, nqn string, addr any, inline int) string {
	param := ""
	if inline != 0 {
		param = fmt.Sprintf("echo %d > ports/1/param_inline_data_size\n", inline)
	}
	return fmt.Sprintf(`truncate -s %dM /tmp/kdisk
losetup /dev/loop0 /tmp/kdisk
cd /sys/kernel/config/nvmet
mkdir subsystems/%[2]s
echo 1 > subsystems/%[2]s/attr_allow_any_host
mkdir subsystems/%[2]s/namespaces/1
echo -n /dev/loop0 > subsystems/%[2]s/namespaces/1/device_path
echo 1 > subsystems/%[2]s/namespaces/1/enable
mkdir ports/1
echo rdma > ports/1/addr_trtype
echo ipv4 > ports/1/addr_adrfam
echo %[3]v > ports/1/addr_traddr
echo 4420 > ports/1/addr_trsvcid
%[4]sln -s /sys/kernel/config/nvmet/subsystems/%[2]s ports/1/subsystems/%[2]s`, diskMiB, nqn, addr, param)
}

func waitOutput(t *testing.T, p *HostProc, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(p.Output(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q within %v:\n%s", s, timeout, p.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func fileSHA(t *testing.T, path string, n int) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hs := sha256.New()
	if _, err := io.CopyN(hs, f, int64(n)); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", hs.Sum(nil))
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// TestNVMeoFRxeControl is the control for the loss check without goroce:
// the stock nvme-rdma host in one VM against the stock nvmet-rdma target in
// the other, both on rxe, with the same 2 % netem loss on the host VM's
// transmissions and an 8 MiB dd of 1 MiB blocks (eight 128 KiB commands in
// flight, as the loss check ran before it went to one at a time). It shows whether the kernel host's
// stalls (docs/nvmeof.md: Linux 6.1 rxe re-runs the executed REG_MR after a
// retransmission) come with any target. It asserts only that the data comes
// back intact and logs the host's timeouts, resets and rxe lines. Not in CI:
// GOROCE_NVME_RXE_CONTROL=1 runs it.
func TestNVMeoFRxeControl(t *testing.T) {
	if os.Getenv("GOROCE_NVME_RXE_CONTROL") == "" {
		t.Skip("GOROCE_NVME_RXE_CONTROL=1 runs the rxe-rxe control of the NVMe-oF loss check (minutes)")
	}
	h := New(t, Config{VMs: 2})
	nqn := "nqn.2026-12.io.goroce:interop-rxe-control"
	tgt := h.VMIP(1)
	h.Run(1, "set -e\n"+nvmetScript(64, nqn, tgt, 0), time.Minute).Check(t)
	h.Run(0, fmt.Sprintf("nvme connect -t rdma -a %v -s 4420 --hostnqn %s --hostid %s -n %s", tgt, nvmeHostNQN, nvmeHostID, nqn), 2*time.Minute).Check(t)
	defer h.Run(0, "nvme disconnect -n "+nqn, time.Minute)
	h.Run(0, `for i in $(seq 50); do [ -b /dev/nvme0n1 ] && exit 0; sleep 0.2; done; exit 1`, time.Minute).Check(t)
	if dir := os.Getenv("GOROCE_NVME_PCAP"); dir != "" {
		c, err := h.Capture(filepath.Join(dir, "nvme-rxe-control.pcap"), "udp port 4791")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Stop()
	}
	start := time.Now()
	// The kernel target's MDTS lets a 1 MiB dd write go as one command, so
	// the host would never have two in flight; goroce's (128 KiB) splits it
	// into eight, each a REG_MR and a SEND on the send queue. The same
	// 128 KiB limit here gives the host the same send queue.
	r := h.Run(0, `set -e
echo 128 > /sys/block/nvme0n1/queue/max_sectors_kb
dmesg -c > /dev/null
tc qdisc add dev eth0 root netem loss 2%
trap 'tc qdisc del dev eth0 root; dmesg | grep -iE "nvme|rxe" | tail -30 >&2' EXIT
dd if=/dev/urandom of=/tmp/data2 bs=1M count=8 2>/dev/null
dd if=/tmp/data2 of=/dev/nvme0n1 bs=1M seek=1 oflag=direct 2>/dev/null
sha256sum < /tmp/data2
dd if=/dev/nvme0n1 bs=1M skip=1 count=8 iflag=direct 2>/dev/null | sha256sum`, 10*time.Minute).Check(t)
	sums := regexp.MustCompile(`(?m)^([0-9a-f]{64})`).FindAllStringSubmatch(r.Stdout, -1)
	if len(sums) != 2 || sums[0][1] != sums[1][1] {
		t.Fatalf("rxe-rxe with 2%% loss, written and read-back SHA-256 differ:\n%s", r)
	}
	t.Logf("rxe-rxe with netem loss 2%%: 8 MiB written with dd oflag=direct and read back in %v; I/O timeouts %d, 'not free' %d; the host's log:\n%s",
		time.Since(start).Round(time.Second), strings.Count(r.Stderr, "timeout"), strings.Count(r.Stderr, "not free"), r.Stderr)
}
