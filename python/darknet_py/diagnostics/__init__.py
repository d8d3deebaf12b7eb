"""Checking the engine and the machine: `selftest` and its op cases, layer coverage per device,
`info` (sysinfo), and the environment set up for the CUDA and OpenCL runtimes before the engine loads."""
