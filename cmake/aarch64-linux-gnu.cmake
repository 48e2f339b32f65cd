# Cross-compiling libturboquant and its tests for 64-bit ARM (make test-arm): Debian's
# gcc-aarch64-linux-gnu, the tests run under qemu-user-static (qemu-aarch64-static).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
# The C library the binaries run on: the cross package's (qemu's -L prefix), unless Debian's
# arm64 multiarch libc is installed (scripts/arm-engine-check.sh installs it): the loader would
# then mix the prefix's ld.so with the multiarch libc.so.6 (it searches /lib/aarch64-linux-gnu
# first), and threaded programs hang; without -L everything comes from the multiarch libc.
if(EXISTS /lib/ld-linux-aarch64.so.1)
  set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static)
else()
  set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static;-L;/usr/aarch64-linux-gnu)
endif()
