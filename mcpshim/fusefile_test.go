package mcpshim

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// fuseRoot is a FUSE file system in memory holding one file, report.txt.
type fuseRoot struct{ fs.Inode }

func (r *fuseRoot) OnAdd(ctx context.Context) {
	f := r.NewPersistentInode(ctx, &fs.MemRegularFile{Data: []byte("numbers"), Attr: fuse.Attr{Mode: 0o644}}, fs.StableAttr{})
	r.AddChild("report.txt", f, true)
}

// A file of a FUSE file system (sshfs, a VM's virtiofs share) is data at
// rest though the kernel can poll it, as it can every FUSE file: it is read
// as a file on disk is, not refused as a kernel stream.
func TestFUSEFileIsReadAsAFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a FUSE file system (CI runs this as root)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no FUSE here: %v", err)
	}
	dir := t.TempDir()
	server, err := fs.Mount(dir, &fuseRoot{}, &fs.Options{MountOptions: fuse.MountOptions{DirectMountStrict: true, Name: "mailctl-test"}})
	if err != nil {
		t.Skipf("cannot mount FUSE here: %v", err)
	}
	t.Cleanup(func() { server.Unmount() })
	b, full, err := ReadRegularFile(filepath.Join(dir, "report.txt"), 100)
	if err != nil || !full || string(b) != "numbers" {
		t.Errorf("a FUSE file: %q %v %v, want it read", b, full, err)
	}
}
