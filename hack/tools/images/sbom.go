package main

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The SBOM of an image is an SPDX 2.3 JSON document written from the Go build information of the
// binaries the image holds (debug/buildinfo, what `go version -m` prints): every module linked in,
// with its version and its go.sum checksum, and the Go standard library. It describes the image
// index (all platforms), so the same document is in every platform's image, at sbomPath, and
// next to the layout, <out>/<image>.spdx.json.

// sbomPath is where an image keeps its SBOM; scanners (trivy, syft) pick up *.spdx.json files.
func sbomPath(image string) string { return "usr/share/doc/vpcgw/" + image + ".spdx.json" }

// licensePath is where every image keeps vpcgw's LICENSE.
const licensePath = "usr/share/doc/vpcgw/LICENSE"

const spdxLicense = "Apache-2.0"

type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name                  string            `json:"name"`
	SPDXID                string            `json:"SPDXID"`
	VersionInfo           string            `json:"versionInfo,omitempty"`
	Supplier              string            `json:"supplier,omitempty"`
	DownloadLocation      string            `json:"downloadLocation"`
	FilesAnalyzed         bool              `json:"filesAnalyzed"`
	Checksums             []spdxChecksum    `json:"checksums,omitempty"`
	LicenseConcluded      string            `json:"licenseConcluded"`
	LicenseDeclared       string            `json:"licenseDeclared"`
	CopyrightText         string            `json:"copyrightText"`
	PrimaryPackagePurpose string            `json:"primaryPackagePurpose,omitempty"`
	ExternalRefs          []spdxExternalRef `json:"externalRefs,omitempty"`
	Comment               string            `json:"comment,omitempty"`
}

type spdxChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxExternalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	SPDXElementID      string `json:"spdxElementId"`
	RelationshipType   string `json:"relationshipType"`
	RelatedSPDXElement string `json:"relatedSpdxElement"`
}

// imageBinary is one executable of an image: a command built for one architecture, and where the
// image's platforms hold it.
type imageBinary struct {
	cmd, arch string
	paths     []string // in the image, with a leading slash
	data      []byte
}

var spdxIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// makeSBOM writes the SPDX document of one image.
func makeSBOM(image, title string, bins []imageBinary, o options, created time.Time) ([]byte, error) {
	slices.SortFunc(bins, func(a, b imageBinary) int { return cmp.Or(cmp.Compare(a.cmd, b.cmd), cmp.Compare(a.arch, b.arch)) })
	source := "git+" + o.source + ".git@" + o.revision
	imageID := "SPDXRef-Image-" + spdxIDUnsafe.ReplaceAllString(image, "-")
	doc := spdxDocument{
		SPDXVersion: "SPDX-2.3",
		DataLicense: "CC0-1.0",
		SPDXID:      "SPDXRef-DOCUMENT",
		Name:        image + "-" + o.version,
		CreationInfo: spdxCreationInfo{
			Created:  created.Format(time.RFC3339),
			Creators: []string{"Organization: " + vendor, "Tool: vpcgw-hack-tools-images"},
		},
		Packages: []spdxPackage{{
			Name: image, SPDXID: imageID, VersionInfo: o.version,
			Supplier: "Organization: " + vendor, DownloadLocation: source,
			LicenseConcluded: spdxLicense, LicenseDeclared: spdxLicense, CopyrightText: copyright,
			PrimaryPackagePurpose: "CONTAINER",
			ExternalRefs: []spdxExternalRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl",
				ReferenceLocator: "pkg:oci/" + image + "?repository_url=" + registry + "/" + image + "&tag=" + o.version}},
			Comment: title + ": the image index of every platform (" + strings.Join(platformNames(), ", ") + ")",
		}},
		Relationships: []spdxRelationship{{"SPDXRef-DOCUMENT", "DESCRIBES", imageID}},
	}
	// The modules, one package each however many binaries link them.
	modules := map[string]int{} // path@version → index in doc.Packages
	ids := map[string]bool{}
	uniqueID := func(base string) string {
		id := "SPDXRef-" + spdxIDUnsafe.ReplaceAllString(base, "-")
		for n := 2; ids[id]; n++ {
			id = fmt.Sprintf("SPDXRef-%s-%d", spdxIDUnsafe.ReplaceAllString(base, "-"), n)
		}
		ids[id] = true
		return id
	}
	module := func(path, version, sum, comment string) (string, error) {
		key := path + "@" + version
		if i, ok := modules[key]; ok {
			return doc.Packages[i].SPDXID, nil
		}
		p := spdxPackage{
			Name: path, SPDXID: uniqueID("Module-" + key), VersionInfo: version,
			DownloadLocation: "NOASSERTION", LicenseConcluded: "NOASSERTION", LicenseDeclared: "NOASSERTION", CopyrightText: "NOASSERTION",
			PrimaryPackagePurpose: "LIBRARY", Comment: comment,
		}
		purl := "pkg:golang/" + path + "@" + version
		if path == "stdlib" {
			purl = "pkg:golang/stdlib@" + strings.TrimPrefix(version, "go")
		} else {
			p.DownloadLocation = "https://proxy.golang.org/" + escapeModule(path) + "/@v/" + escapeModule(version) + ".zip"
		}
		p.ExternalRefs = []spdxExternalRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: purl}}
		if sum != "" {
			// go.sum's h1: is the base64 SHA-256 of the module's file tree hash (dirhash): SPDX
			// takes it as a SHA256 checksum in hex, the comment keeps it as go.sum spells it.
			raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sum, "h1:"))
			if !strings.HasPrefix(sum, "h1:") || err != nil || len(raw) != sha256.Size {
				return "", fmt.Errorf("module %s: checksum %q is not a go.sum h1: hash", key, sum)
			}
			p.Checksums = []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: hex.EncodeToString(raw)}}
			p.Comment = "go.sum " + sum
			if comment != "" {
				p.Comment += "; " + comment
			}
		}
		modules[key] = len(doc.Packages)
		doc.Packages = append(doc.Packages, p)
		return p.SPDXID, nil
	}
	var binIDs []string
	for _, b := range bins {
		bi, err := buildinfo.Read(bytes.NewReader(b.data))
		if err != nil {
			return nil, fmt.Errorf("reading the Go build information of %s for linux/%s: %w", b.cmd, b.arch, err)
		}
		sum := sha256.Sum256(b.data)
		id := uniqueID("Binary-" + b.cmd + "-linux-" + b.arch)
		binIDs = append(binIDs, hex.EncodeToString(sum[:]))
		var settings []string
		for _, s := range bi.Settings {
			settings = append(settings, s.Key+"="+s.Value)
		}
		doc.Packages = append(doc.Packages, spdxPackage{
			Name: b.cmd, SPDXID: id, VersionInfo: o.version,
			Supplier: "Organization: " + vendor, DownloadLocation: source,
			Checksums:        []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: hex.EncodeToString(sum[:])}},
			LicenseConcluded: spdxLicense, LicenseDeclared: spdxLicense, CopyrightText: copyright,
			PrimaryPackagePurpose: "APPLICATION",
			ExternalRefs: []spdxExternalRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl",
				ReferenceLocator: "pkg:golang/" + bi.Main.Path + "@" + o.version + "?goos=linux&goarch=" + b.arch}},
			Comment: fmt.Sprintf("%s for linux/%s at %s; main package %s, %s, %s", b.cmd, b.arch, strings.Join(b.paths, ", "),
				bi.Path, bi.GoVersion, strings.Join(settings, " ")),
		})
		doc.Relationships = append(doc.Relationships, spdxRelationship{imageID, "CONTAINS", id})
		deps := []spdxRelationship{}
		std, err := module("stdlib", bi.GoVersion, "", "the Go standard library")
		if err != nil {
			return nil, err
		}
		deps = append(deps, spdxRelationship{id, "DEPENDS_ON", std})
		for _, d := range bi.Deps {
			path, version, sum, comment := d.Path, d.Version, d.Sum, ""
			if r := d.Replace; r != nil {
				path, version, sum, comment = r.Path, r.Version, r.Sum, "replaces "+d.Path+"@"+d.Version
			}
			mid, err := module(path, version, sum, comment)
			if err != nil {
				return nil, fmt.Errorf("%s for linux/%s: %w", b.cmd, b.arch, err)
			}
			deps = append(deps, spdxRelationship{id, "DEPENDS_ON", mid})
		}
		doc.Relationships = append(doc.Relationships, deps...)
	}
	// Unique per content, the same for the same content (reproducible).
	h := sha256.Sum256([]byte(strings.Join(binIDs, "\n")))
	doc.DocumentNamespace = o.source + "/spdx/" + image + "/" + o.version + "-" + hex.EncodeToString(h[:8])
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// escapeModule escapes a module path or version as the module proxy protocol does: each upper
// case letter becomes '!' and its lower case.
func escapeModule(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 'A' && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

func platformNames() []string {
	var out []string
	for _, a := range archs {
		out = append(out, "linux/"+a)
	}
	return out
}
