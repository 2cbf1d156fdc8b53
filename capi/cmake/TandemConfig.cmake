# find_package(Tandem): the imported target Tandem::tandem, Tandem's C ABI
# (libtandem) with the include folder holding tandem.h, tandem.hpp,
# tandem_cpu_kernel.hpp and the kernel-side headers (tandem/runtime.h,
# tandem/blob.h), which CUDA (nvcc), HIP (hipcc) and host C++ compilers all
# take. Installed by `cargo xtask install-capi --prefix DIR`; relocatable:
# every path is found from this file's own place (DIR/lib/cmake/Tandem).
#
#   Tandem::tandem         the shared library (default)
#   Tandem::tandem_static  the static library (link also: pthread, dl, m)

get_filename_component(_tandem_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)

if(NOT TARGET Tandem::tandem)
  add_library(Tandem::tandem SHARED IMPORTED)
  set_target_properties(Tandem::tandem PROPERTIES
    IMPORTED_LOCATION "${_tandem_prefix}/lib/libtandem.so"
    INTERFACE_INCLUDE_DIRECTORIES "${_tandem_prefix}/include"
    INTERFACE_COMPILE_FEATURES "cxx_std_17")
endif()

if(NOT TARGET Tandem::tandem_static)
  find_package(Threads REQUIRED)
  add_library(Tandem::tandem_static STATIC IMPORTED)
  set_target_properties(Tandem::tandem_static PROPERTIES
    IMPORTED_LOCATION "${_tandem_prefix}/lib/libtandem.a"
    INTERFACE_INCLUDE_DIRECTORIES "${_tandem_prefix}/include"
    INTERFACE_COMPILE_FEATURES "cxx_std_17"
    INTERFACE_LINK_LIBRARIES "Threads::Threads;${CMAKE_DL_LIBS};m")
endif()

set(Tandem_INCLUDE_DIR "${_tandem_prefix}/include")
set(Tandem_FOUND TRUE)
unset(_tandem_prefix)
