//go:build !unix

package vkc

import "os"

func inode(os.FileInfo) string { return "" }
