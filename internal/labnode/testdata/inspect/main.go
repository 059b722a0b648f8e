// Command inspect is the program of the lab node's test image (TestImageContainer): it reports
// what a container sees, serves until SIGTERM, or prints a file.
//
//	inspect report <path>...   print a JSON report: ids, cwd, hostname, env, the files' contents, whether /tmp (in the root) is writable
//	inspect serve               write /tmp/served, then wait for SIGTERM
//	inspect cat <path>          print a file
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: inspect report|serve|cat")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "report":
		groups, _ := os.Getgroups()
		cwd, _ := os.Getwd()
		host, _ := os.Hostname()
		files := map[string]string{}
		for _, p := range os.Args[2:] {
			data, err := os.ReadFile(p)
			if err != nil {
				files[p] = "error: " + err.Error()
				continue
			}
			files[p] = string(data)
		}
		rootWritable := os.WriteFile("/tmp/written-by-container", []byte("x"), 0o644) == nil
		out, _ := json.Marshal(map[string]any{"uid": os.Getuid(), "gid": os.Getgid(), "groups": groups, "cwd": cwd,
			"hostname": host, "env": os.Environ(), "files": files, "rootWritable": rootWritable, "args": os.Args[2:]})
		fmt.Println(string(out))
	case "serve":
		if err := os.WriteFile("/tmp/served", []byte("served by "+fmt.Sprint(os.Getpid())), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
	case "cat":
		data, err := os.ReadFile(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Stdout.Write(data)
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}
