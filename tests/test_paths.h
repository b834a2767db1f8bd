// Where the tests find what the build put outside them: the tpserve binary, tests/data and the
// fetched assets. Defined in tests/test_paths.cc, the one source file whose command line holds
// these paths (cmake/TpserveCcache.cmake says why).
#pragma once

#include <string>

namespace tpserve::testing {

std::string TpserveBinary();      // the built tpserve executable
std::string TestDataDir();        // tests/data in the source tree
std::string BuiltInAssetsDir();   // where scripts/fetch_assets.sh puts them (TPSERVE_ASSETS overrides)

}  // namespace tpserve::testing
