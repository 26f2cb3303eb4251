# CMake toolchain file: cross-compile qvl for aarch64 (ARM64) Linux on an x86_64
# Debian 12 host with Debian's g++-aarch64-linux-gnu, against a sysroot made of
# Debian's arm64 packages unpacked with dpkg-deb -x (scripts/cross_arm64.sh
# makes it and uses this file; docs/ARM64.md).
#
#   cmake -S . -B build-arm64 -G Ninja \
#         -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
#         -DQVL_ARM64_SYSROOT=$HOME/arm64-sysroot
#
# The sysroot is QVL_ARM64_SYSROOT (cache variable), else the environment
# variable of that name, else arm64-sysroot/ beside the source tree.
# libc, libstdc++ and their headers come from the cross compiler's own
# /usr/aarch64-linux-gnu; everything else (torch, fmt, png, ...) from the sysroot.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

if(NOT QVL_ARM64_SYSROOT)
  if(DEFINED ENV{QVL_ARM64_SYSROOT})
    set(QVL_ARM64_SYSROOT "$ENV{QVL_ARM64_SYSROOT}")
  else()
    get_filename_component(QVL_ARM64_SYSROOT "${CMAKE_CURRENT_LIST_DIR}/../../arm64-sysroot" ABSOLUTE)
  endif()
endif()
set(QVL_ARM64_SYSROOT "${QVL_ARM64_SYSROOT}" CACHE PATH "Root of the unpacked Debian arm64 packages")
# try_compile() projects read this file again: hand them the same sysroot.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES QVL_ARM64_SYSROOT)
if(NOT EXISTS "${QVL_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu")
  message(FATAL_ERROR "no arm64 sysroot at ${QVL_ARM64_SYSROOT} (scripts/cross_arm64.sh makes one)")
endif()

set(CMAKE_SYSROOT "${QVL_ARM64_SYSROOT}")
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Headers, libraries and CMake package configs only from the sysroot; build
# tools (pkg-config, python3) from the host.
set(CMAKE_FIND_ROOT_PATH "${QVL_ARM64_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# The host's pkg-config, reading only the sysroot's .pc files and prefixing
# the paths it prints with the sysroot.
set(ENV{PKG_CONFIG_DIR} "")
set(ENV{PKG_CONFIG_PATH} "")
set(ENV{PKG_CONFIG_LIBDIR} "${QVL_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu/pkgconfig:${QVL_ARM64_SYSROOT}/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${QVL_ARM64_SYSROOT}")

# Shared libraries needed only by other shared libraries (libtorch's long
# tail: opencv, ffmpeg, ...) are looked up here at link time.
set(CMAKE_EXE_LINKER_FLAGS_INIT
    "-Wl,-rpath-link,${QVL_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu -Wl,-rpath-link,${QVL_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu/openblas-pthread")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "${CMAKE_EXE_LINKER_FLAGS_INIT}")

# ctest (and add_test commands) run the aarch64 binaries under user-mode QEMU.
find_program(QVL_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(QVL_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR "${QVL_QEMU_AARCH64};-L;${QVL_ARM64_SYSROOT}")
endif()
