module github.com/jacobsa/fuse

go 1.26.0

require (
	github.com/kylelemons/godebug v1.1.0
	golang.org/x/sys v0.50.0
)
