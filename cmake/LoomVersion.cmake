# Stamps the version and the git commit (with a -dirty mark) into loom_version.hpp at configure
# time; the run directory and `loom --version` report them.
execute_process(COMMAND git rev-parse --short=12 HEAD
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} OUTPUT_VARIABLE LOOM_GIT_COMMIT
  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _git_rc)
if(NOT _git_rc EQUAL 0 OR LOOM_GIT_COMMIT STREQUAL "")
  set(LOOM_GIT_COMMIT "unknown")
else()
  execute_process(COMMAND git status --porcelain --untracked-files=no
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} OUTPUT_VARIABLE _git_dirty ERROR_QUIET)
  if(NOT _git_dirty STREQUAL "")
    set(LOOM_GIT_COMMIT "${LOOM_GIT_COMMIT}-dirty")
  endif()
endif()
configure_file(${CMAKE_SOURCE_DIR}/cmake/loom_version.hpp.in
  ${CMAKE_BINARY_DIR}/generated/loom_version.hpp @ONLY)
