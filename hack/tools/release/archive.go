package main

import (
	"archive/tar"
	"bytes"
	"cmp"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Every archive of a release is reproducible: entries in name order, owned by 0:0 without names,
// the release's epoch as every time, gzip without a file name or time.

// entry is one file of an archive.
type entry struct {
	name string // slash-separated, a trailing slash for a directory
	mode int64
	data []byte // regular files
	path string // or the file to read it from
}

func writeTar(w io.Writer, entries []entry, epoch time.Time) error {
	slices.SortFunc(entries, func(a, b entry) int { return cmp.Compare(a.name, b.name) })
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		data := e.data
		if e.name[len(e.name)-1] == '/' {
			h.Typeflag = tar.TypeDir
		} else if e.path != "" {
			var err error
			if data, err = os.ReadFile(e.path); err != nil {
				return err
			}
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("archiving %s: %w", e.name, err)
		}
		if _, err := tw.Write(data); err != nil {
			return fmt.Errorf("archiving %s: %w", e.name, err)
		}
	}
	return tw.Close()
}

// writeArchive writes a tar (gz: gzipped) of entries to path.
func writeArchive(path string, entries []entry, epoch time.Time, gz bool) error {
	var buf bytes.Buffer
	if gz {
		zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		if err != nil {
			return err
		}
		if err := writeTar(zw, entries, epoch); err != nil {
			return err
		}
		if err := zw.Close(); err != nil {
			return err
		}
	} else if err := writeTar(&buf, entries, epoch); err != nil {
		return err
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// dirEntries lists a directory tree as archive entries under prefix (files 0644, directories
// 0755: what they hold is data, never programs).
func dirEntries(dir, prefix string) ([]entry, error) {
	var out []entry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		name := prefix + filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			out = append(out, entry{name: name + "/", mode: 0o755})
		case d.Type().IsRegular():
			out = append(out, entry{name: name, mode: 0o644, path: p})
		default:
			return fmt.Errorf("%s: only regular files and directories are archived", p)
		}
		return nil
	})
	return out, err
}

// normalizeTarGz rewrites a gzipped tar (helm's chart package, whose entries carry the time of
// packaging) with the epoch as every time and no owner names, keeping the entries' order and the
// gzip header's extra field and comment (helm marks its packages there).
func normalizeTarGz(path string, epoch time.Time) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	zw.Extra, zw.Comment = zr.Extra, zr.Comment
	tr, tw := tar.NewReader(zr), tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeDir {
			return fmt.Errorf("%s: %s is neither a file nor a directory", path, h.Name)
		}
		n := &tar.Header{Name: h.Name, Mode: h.Mode & 0o777, Size: h.Size, Typeflag: h.Typeflag, ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(n); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return fmt.Errorf("%s: %s: %w", path, h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	f.Close()
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
