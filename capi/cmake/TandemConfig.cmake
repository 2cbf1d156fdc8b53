# find_package(Tandem): the imported target Tandem::tandem, Tandem's C ABI
# (libtandem.so) with the include folder holding tandem.h, tandem.hpp,
# tandem_cpu_kernel.hpp and the kernel-side headers (tandem/runtime.h,
# tandem/blob.h), which CUDA (nvcc), HIP (hipcc) and host C++ compilers all
# take. Installed by `cargo xtask install-capi --prefix DIR`; relocatable:
# every path is found from this file's own place (DIR/lib/cmake/Tandem).
# Only the shared library is installed, so it is the only target.

get_filename_component(_tandem_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)

if(NOT TARGET Tandem::tandem)
  add_library(Tandem::tandem SHARED IMPORTED)
  set_target_properties(Tandem::tandem PROPERTIES
    IMPORTED_LOCATION "${_tandem_prefix}/lib/libtandem.so"
    IMPORTED_SONAME "libtandem.so.0"
    INTERFACE_INCLUDE_DIRECTORIES "${_tandem_prefix}/include"
    INTERFACE_COMPILE_FEATURES "cxx_std_17")
endif()

set(Tandem_INCLUDE_DIR "${_tandem_prefix}/include")
set(Tandem_FOUND TRUE)
unset(_tandem_prefix)
