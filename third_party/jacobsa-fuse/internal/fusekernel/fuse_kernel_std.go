package fusekernel

var IsPlatformFuseT bool
