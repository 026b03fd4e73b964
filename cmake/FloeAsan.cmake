# FLOE_SANITIZE=address (scripts/asan.sh): the whole tree (every service,
# library and test, CUDA off) built with AddressSanitizer (with LeakSanitizer)
# and UndefinedBehaviorSanitizer; any UB report aborts the process
# (-fno-sanitize-recover), so a test that triggers one fails. -O1 keeps the
# suite fast enough for CI; -g1 gives file:line in reports. NDEBUG is not
# defined, so Abseil's and the standard library's debug checks are on too
# (_GLIBCXX_ASSERTIONS: bounds-checked operator[] and front()/back()).
# With clang, tests/fuzz/ adds libFuzzer targets to the same build.
set(_floe_asan_flags -fsanitize=address,undefined -fno-sanitize-recover=undefined
    -fno-omit-frame-pointer)
add_compile_options(${_floe_asan_flags} -D_GLIBCXX_ASSERTIONS)
add_link_options(-fsanitize=address,undefined)
set(CMAKE_CXX_FLAGS_RELWITHDEBINFO "-O1 -g1")
set(CMAKE_C_FLAGS_RELWITHDEBINFO "-O1 -g1")
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  set(FLOE_FUZZ ON)
else()
  set(FLOE_FUZZ OFF)
  message(STATUS "Floe: FLOE_SANITIZE=address without clang: no fuzz targets")
endif()
