# Stamps the version and the git commit (with a -dirty mark) into loom_version.hpp. The stamp is
# redone at every build (target loom_version, run as a script), not only at configure time, so
# that run.json and checkpoints name the commit the binary was really built from; the header is
# rewritten only when the text changes, so an unchanged commit rebuilds nothing.
if(CMAKE_SCRIPT_MODE_FILE)  # cmake -P: the build-time step
  execute_process(COMMAND git rev-parse --short=12 HEAD
    WORKING_DIRECTORY ${SRC} OUTPUT_VARIABLE LOOM_GIT_COMMIT
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _git_rc)
  if(NOT _git_rc EQUAL 0 OR LOOM_GIT_COMMIT STREQUAL "")
    set(LOOM_GIT_COMMIT "unknown")
  else()
    execute_process(COMMAND git status --porcelain --untracked-files=no
      WORKING_DIRECTORY ${SRC} OUTPUT_VARIABLE _git_dirty ERROR_QUIET)
    if(NOT _git_dirty STREQUAL "")
      set(LOOM_GIT_COMMIT "${LOOM_GIT_COMMIT}-dirty")
    endif()
  endif()
  set(PROJECT_VERSION ${VERSION})
  configure_file(${SRC}/cmake/loom_version.hpp.in ${OUT}.tmp @ONLY)
  execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different ${OUT}.tmp ${OUT})
  file(REMOVE ${OUT}.tmp)
  return()
endif()

set(LOOM_VERSION_HEADER ${CMAKE_BINARY_DIR}/generated/loom_version.hpp)
set(_stamp ${CMAKE_COMMAND} -DSRC=${CMAKE_SOURCE_DIR} -DOUT=${LOOM_VERSION_HEADER} -DVERSION=${PROJECT_VERSION}
    -P ${CMAKE_SOURCE_DIR}/cmake/LoomVersion.cmake)
file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/generated)
execute_process(COMMAND ${_stamp})  # present from the start (the first compile needs it)
add_custom_target(loom_version ALL COMMAND ${_stamp} BYPRODUCTS ${LOOM_VERSION_HEADER}
                  COMMENT "Stamping the git commit into loom_version.hpp")
