module gpuctl.dev/tests/go_regexp

go 1.21
