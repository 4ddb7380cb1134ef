pytest_plugins = ["tests.kube_emulator.fixtures"]
