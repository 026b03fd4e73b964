# FLOE_SANITIZE=thread (scripts/tsan.sh): a ThreadSanitizer build of the
# gRPC-free suffix-cache store and tree, and their multi-threaded stress test.
# Only this part: Debian's gRPC and Abseil libraries are not TSan-built, so a
# gRPC binary would report races inside them; the store uses std:: (pthread)
# locks, which TSan intercepts, and header-only Abseil containers, which are
# instrumented here.
add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
add_link_options(-fsanitize=thread)
find_package(Threads REQUIRED)
find_package(absl REQUIRED)
find_package(GTest REQUIRED)
set(FLOE_BUILD_TESTS ON)
enable_testing()
include(cmake/FloeHelpers.cmake)
add_subdirectory(common/bytes)
add_subdirectory(services/suffix_cache/suffix_tree)
set(_sc ${PROJECT_SOURCE_DIR}/services/suffix_cache)
floe_cc_library(NAME suffix_cache_store
  SRCS ${_sc}/snapshot.cc ${_sc}/suffix_cache_store.cc ${_sc}/worker_pool.cc
  DEPS suffix_cache_suffix_tree common_bytes Threads::Threads absl::flat_hash_map absl::status absl::statusor absl::strings)
floe_cc_test(NAME suffix_cache_store_stress_test
  SRCS ${PROJECT_SOURCE_DIR}/tests/services/suffix_cache/service/store_stress_test.cc
       ${PROJECT_SOURCE_DIR}/tests/services/suffix_cache/service/worker_pool_test.cc
  DEPS suffix_cache_store LABELS tsan)
