# External programs that tests run. scripts/setup.sh installs every one; where one is missing anyway,
# the test that needs it fails with one line that names the program and its Debian package, instead
# of ctest's "could not find executable" or a traceback from the middle of the test.
#
#   tpserve_test_tool(OUT program package)
# sets OUT to the program's path, or to a command that prints why it cannot run and exits 1.
function(tpserve_test_tool out program package)
  string(MAKE_C_IDENTIFIER "TPSERVE_TOOL_${program}" cache_var)
  find_program(${cache_var} ${program})
  if(${cache_var})
    set(${out} ${${cache_var}} PARENT_SCOPE)
  else()
    message(STATUS "tpserve: ${program} not found; the tests that run it will fail saying so "
                   "(Debian package ${package}; scripts/setup.sh installs it)")
    set(${out} sh -c "echo '${program} is not installed: apt-get install ${package} (scripts/setup.sh does)'; exit 1"
        PARENT_SCOPE)
  endif()
endfunction()
