module github.com/elb-gate/elb-gate/lincheck

go 1.24

require github.com/anishathalye/porcupine v1.3.1
