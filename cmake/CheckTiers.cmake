# ctest (tiers_are_labelled): every test of the build tree BUILD_DIR carries exactly one tier
# label, unit, integration or e2e (tests/CMakeLists.txt says what each means). Reads the tests
# as ctest sees them (ctest -N, which discovers the GoogleTest binaries' tests), all of them and
# those of each tier; a binary that is not built (a *_NOT_BUILT placeholder: `make check` builds
# only the binaries with unit tests) has no tests to check.
cmake_policy(SET CMP0057 NEW)  # IN_LIST in script mode

function(tests_of out)
  execute_process(COMMAND ${CTEST} -N ${ARGN} WORKING_DIRECTORY ${BUILD_DIR}
                  OUTPUT_VARIABLE text RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "ctest -N ${ARGN} failed (${rc}): ${err}")
  endif()
  string(REGEX MATCHALL "Test +#[0-9]+: [^\n]+" lines "${text}")
  set(names "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^Test +#[0-9]+: " "" name "${line}")
    if(NOT name MATCHES "_NOT_BUILT$")
      list(APPEND names "${name}")
    endif()
  endforeach()
  set(${out} "${names}" PARENT_SCOPE)
endfunction()

tests_of(all)
set(tiers unit integration e2e)
foreach(t IN LISTS tiers)
  tests_of(in_${t} -L "^${t}$")
endforeach()
set(bad "")
foreach(name IN LISTS all)
  set(found "")
  foreach(t IN LISTS tiers)
    if(name IN_LIST in_${t})
      list(APPEND found ${t})
    endif()
  endforeach()
  list(LENGTH found n)
  if(NOT n EQUAL 1)
    list(APPEND bad "${name} (tiers: ${found})")
  endif()
endforeach()
list(LENGTH all count)
if(bad)
  list(LENGTH bad nbad)
  list(JOIN bad "\n  " lines)
  message(FATAL_ERROR "${nbad} of ${count} tests without exactly one tier (unit, integration, e2e):\n  ${lines}")
endif()
message(STATUS "${count} tests, each with exactly one tier")
