# package.cmake - `cpack -G DEB` in the build tree makes sheaf_<version>_<arch>.deb:
# the libraries (libsheaf.so, libsheaf.a, libsheaf-malloc.so), the headers, sheaf.pc,
# the CMake package, sheafinfo and the manual pages, under /usr.  The benchmark
# driver (component "bench") is left out: it links every peer allocator and DPDK.
# scripts/test-package.sh builds it, installs it and builds examples/cmake-consumer
# against it.
set(CPACK_PACKAGE_NAME sheaf)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "Userspace slab allocator with per-CPU sheaves and barns, and a malloc replacement")
set(CPACK_PACKAGE_DESCRIPTION
  "Sheaf brings the Linux 7.0 SLUB design (per-CPU sheaves, per-node barns, slabs) to
programs, with RCU-deferred freeing, debug caches and debug objects. The package
holds the library, the LD_PRELOAD malloc replacement libsheaf-malloc.so, the
headers, pkg-config and CMake files, the sheafinfo tool and the manual pages.")
set(CPACK_PACKAGE_CONTACT "Sheaf developers <sheaf@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
# Run-time dependencies from the binaries (dpkg-shlibdeps: liburcu, libc); the
# headers, sheaf.pc and SheafConfig.cmake need liburcu's development files and
# pkg-config to be used.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "liburcu-dev, pkgconf | pkg-config")
# One package, without the benchmark component.
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_GROUPING ALL_COMPONENTS_IN_ONE)
set(CPACK_COMPONENTS_ALL Unspecified)
include(CPack)
