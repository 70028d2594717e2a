# `cmake --install` and the .deb (`make package`: CPack, docs/INSTALL.md).
#
#   bin/headroom, bin/headroom-diloco          the binaries
#   share/headroom/policies/                   the shipped policies (fleet-sim finds them here:
#                                              common/install_paths.h)
#   share/headroom/scenarios/                  the scenarios, as files (they are built in too)
#   share/headroom/deploy/                     config examples, Prometheus rules, Grafana dashboard
#   lib/systemd/system/                        headroom-agent@.service, headroom-coordinator.service,
#                                              headroom-domain@.service
#   lib/python3/dist-packages/headroom_client  the Python client (import headroom_client)
#   share/doc/headroom/                        README, docs, LICENSE, NOTICE, copyright, changelog
#   share/bash-completion/completions/headroom `headroom completion bash`
#   share/man/man1/headroom.1.gz, headroom-diloco.1.gz   from --help and --version (help2man)
include(GNUInstallDirs)

install(TARGETS headroom RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET headroom-diloco)
  install(TARGETS headroom-diloco RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

set(HEADROOM_SHARE ${CMAKE_INSTALL_DATADIR}/headroom)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/policies/ DESTINATION ${HEADROOM_SHARE}/policies
        PATTERN ".gitignore" EXCLUDE)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/scenarios/ DESTINATION ${HEADROOM_SHARE}/scenarios)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/agent.toml ${PROJECT_SOURCE_DIR}/deploy/coordinator.toml
              ${PROJECT_SOURCE_DIR}/deploy/domain.toml
        DESTINATION ${HEADROOM_SHARE}/deploy)
install(PROGRAMS ${PROJECT_SOURCE_DIR}/deploy/etcd-roles.sh DESTINATION ${HEADROOM_SHARE}/deploy)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/deploy/prometheus ${PROJECT_SOURCE_DIR}/deploy/grafana
        DESTINATION ${HEADROOM_SHARE}/deploy)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/clients/python/headroom_client
        DESTINATION lib/python3/dist-packages
        PATTERN "__pycache__" EXCLUDE)

set(HEADROOM_DOC ${CMAKE_INSTALL_DATADIR}/doc/headroom)
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/LICENSE
              ${PROJECT_SOURCE_DIR}/NOTICE ${PROJECT_SOURCE_DIR}/CHANGELOG.md
        DESTINATION ${HEADROOM_DOC})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${HEADROOM_DOC})
# Debian's places for the licence and the changelog (lintian checks them).
install(FILES ${PROJECT_SOURCE_DIR}/deploy/debian/copyright DESTINATION ${HEADROOM_DOC})
add_custom_command(
  OUTPUT ${CMAKE_BINARY_DIR}/changelog.gz
  COMMAND gzip -9 -n -c ${PROJECT_SOURCE_DIR}/deploy/debian/changelog > ${CMAKE_BINARY_DIR}/changelog.gz
  DEPENDS ${PROJECT_SOURCE_DIR}/deploy/debian/changelog
  VERBATIM)
add_custom_target(headroom_debian_changelog ALL DEPENDS ${CMAKE_BINARY_DIR}/changelog.gz)
install(FILES ${CMAKE_BINARY_DIR}/changelog.gz DESTINATION ${HEADROOM_DOC})

# Bash completion, from the binary's own commands and options (`headroom completion bash`).
install(CODE "
  execute_process(COMMAND \"$<TARGET_FILE:headroom>\" completion bash
                  OUTPUT_FILE \"${CMAKE_BINARY_DIR}/headroom.bash\" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR \"headroom completion bash failed: \${rc}\")
  endif()
  file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_DATADIR}/bash-completion/completions\"
       TYPE FILE RENAME headroom FILES \"${CMAKE_BINARY_DIR}/headroom.bash\")")

# Manual pages, from each binary's own --help and --version (help2man, a Debian package that
# scripts/setup.sh installs; without it there are none, and lintian says no-manual-page).
find_program(HEADROOM_HELP2MAN help2man)
if(HEADROOM_HELP2MAN)
  set(headroom_man_targets headroom)
  if(TARGET headroom-diloco)
    list(APPEND headroom_man_targets headroom-diloco)
  endif()
  foreach(target ${headroom_man_targets})
    if(target STREQUAL "headroom")
      set(summary "keep AI training inside a power budget by steering the workload")
    else()
      set(summary "elastic low-communication training (DiLoCo) on etcd and Gloo")
    endif()
    install(CODE "
      file(MAKE_DIRECTORY \"${CMAKE_BINARY_DIR}/man\")
      execute_process(COMMAND \"${HEADROOM_HELP2MAN}\" --no-info --no-discard-stderr
                              --name \"${summary}\" --section 1 \"$<TARGET_FILE:${target}>\"
                      OUTPUT_FILE \"${CMAKE_BINARY_DIR}/man/${target}.1\" RESULT_VARIABLE rc)
      if(NOT rc EQUAL 0)
        message(FATAL_ERROR \"help2man ${target} failed: \${rc}\")
      endif()
      execute_process(COMMAND gzip -9 -n -f \"${CMAKE_BINARY_DIR}/man/${target}.1\" RESULT_VARIABLE rc)
      if(NOT rc EQUAL 0)
        message(FATAL_ERROR \"gzip ${target}.1 failed: \${rc}\")
      endif()
      file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_MANDIR}/man1\"
           TYPE FILE PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
           FILES \"${CMAKE_BINARY_DIR}/man/${target}.1.gz\")")
  endforeach()
else()
  message(STATUS "help2man not found: the package has no manual pages (scripts/setup.sh installs it)")
endif()

# The units name the binary by its installed path: written at install time, when the prefix is
# known (CPack installs to /usr; `cmake --install --prefix P` to P).
foreach(unit headroom-agent@.service headroom-coordinator.service headroom-domain@.service)
  install(CODE "
    set(HEADROOM_BINDIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\")
    set(HEADROOM_DOCDIR \"\${CMAKE_INSTALL_PREFIX}/${HEADROOM_DOC}\")
    configure_file(\"${PROJECT_SOURCE_DIR}/deploy/${unit}.in\"
                   \"${CMAKE_BINARY_DIR}/units/${unit}\" @ONLY)
    file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\"
         TYPE FILE PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
         FILES \"${CMAKE_BINARY_DIR}/units/${unit}\")")
endforeach()

# The .deb: headroom_<version>_amd64.deb in the build directory, its runtime dependencies from
# dpkg-shlibdeps.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME headroom)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "headroom developers <headroom@example.org>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "power-budget control and headroom analysis for AI training")
# The lines after the synopsis (one string: a CMake list would join them with ';').
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "headroom keeps GRPO training inside a power budget by \
steering the workload\n(generation concurrency, group size) instead of throttling the \
hardware,\nshares one site budget between jobs on etcd, and measures how much more\nwork the \
power already installed can carry.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://example.org/headroom")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "etcd-server, prometheus")
set(CPACK_STRIP_FILES ON)
set(CPACK_OUTPUT_FILE_PREFIX ${CMAKE_BINARY_DIR})
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/_cpack)
include(CPack)
