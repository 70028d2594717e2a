# headroom_direct_links(TARGET OUT): the targets TARGET links itself (LINK_LIBRARIES and
# INTERFACE_LINK_LIBRARIES, $<LINK_ONLY:...> unwrapped).
function(headroom_direct_links target out)
  set(direct "")
  foreach(property LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
    get_target_property(libs ${target} ${property})
    if(NOT libs)
      continue()
    endif()
    foreach(lib IN LISTS libs)
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" lib "${lib}")
      if(TARGET ${lib})
        list(APPEND direct ${lib})
      endif()
    endforeach()
  endforeach()
  set(${out} ${direct} PARENT_SCOPE)
endfunction()

# headroom_link_closure(TARGET OUT): every project and imported target TARGET links, directly or
# through others.
function(headroom_link_closure target out)
  set(seen "")
  set(todo ${target})
  while(todo)
    list(POP_FRONT todo t)
    if(t IN_LIST seen OR NOT TARGET ${t})
      continue()
    endif()
    list(APPEND seen ${t})
    headroom_direct_links(${t} direct)
    list(APPEND todo ${direct})
  endwhile()
  list(REMOVE_ITEM seen ${target})
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

# headroom_links_none_of(TEST TARGET FORBIDDEN): a unit test that TARGET's link closure, written
# at configure time, holds none of FORBIDDEN (a ;-list). Every executable of src/ and bench/ has
# at least one (ctest every_executable_has_a_closure_test).
function(headroom_links_none_of test target forbidden)
  headroom_link_closure(${target} links)
  file(WRITE ${CMAKE_BINARY_DIR}/closures/${test}.links "${links}")
  add_test(NAME ${test}
           COMMAND ${CMAKE_COMMAND} -DTARGET=${target}
                   -DCLOSURE=${CMAKE_BINARY_DIR}/closures/${test}.links "-DFORBIDDEN=${forbidden}"
                   -P ${PROJECT_SOURCE_DIR}/cmake/CheckNoLink.cmake)
  set_tests_properties(${test} PROPERTIES LABELS unit)
  set_property(GLOBAL APPEND PROPERTY HEADROOM_CLOSURE_CHECKED ${target})
endfunction()

# The build targets of DIR and every directory below it.
function(headroom_targets_below dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    headroom_targets_below(${sub} more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# headroom_library_graph(FILE): each library of src/ and what it links of the others, one line
# each ("headroom_agent: headroom_common headroom_control ..."), sorted; what
# scripts/library_graph.py prints and src/README.md holds.
function(headroom_library_graph file)
  headroom_targets_below(${PROJECT_SOURCE_DIR}/src targets)
  set(lines "")
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(NOT type MATCHES "LIBRARY$" OR type STREQUAL "INTERFACE_LIBRARY")
      continue()
    endif()
    headroom_direct_links(${t} direct)
    set(deps "")
    foreach(lib IN LISTS direct)
      get_target_property(lib_type ${lib} TYPE)
      if(lib MATCHES "^headroom_" AND NOT lib_type STREQUAL "INTERFACE_LIBRARY")
        list(APPEND deps ${lib})
      endif()
    endforeach()
    list(REMOVE_DUPLICATES deps)
    list(SORT deps)
    list(JOIN deps " " deps_text)
    list(APPEND lines "${t}: ${deps_text}")
  endforeach()
  list(SORT lines)
  list(JOIN lines "\n" text)
  file(WRITE ${file} "${text}\n")
endfunction()
