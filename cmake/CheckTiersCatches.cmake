# ctest (tiers_check_catches_what_breaks_the_rule): CheckTiers.cmake, run on a fixture project
# (tests/support/tiers_fixture) with a test of no tier and one of two, fails and names both,
# and only them.
execute_process(COMMAND ${CMAKE_COMMAND} -S ${FIXTURE} -B ${WORK} OUTPUT_QUIET
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the fixture did not configure (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -DCTEST=${CTEST} -DBUILD_DIR=${WORK}
                        -P ${CMAKE_CURRENT_LIST_DIR}/CheckTiers.cmake
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_VARIABLE out)
if(rc EQUAL 0)
  message(FATAL_ERROR "the check passed a test with no tier and one with two:\n${out}${err}")
endif()
foreach(expected "2 of 4 tests" "no_tier (tiers: )" "two_tiers (tiers: unit, e2e)")
  string(FIND "${err}" "${expected}" at)
  if(at LESS 0)
    message(FATAL_ERROR "the check's message lacks '${expected}':\n${err}")
  endif()
endforeach()
foreach(fine one_tier_and_tsan "one_tier ")
  string(FIND "${err}" "${fine}" at)
  if(NOT at LESS 0)
    message(FATAL_ERROR "the check named '${fine}', which has one tier:\n${err}")
  endif()
endforeach()
message(STATUS "the check caught both, and only them")
