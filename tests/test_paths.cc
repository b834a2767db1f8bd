#include "tests/test_paths.h"

namespace tpserve::testing {

std::string TpserveBinary() { return TPSERVE_BINARY; }
std::string TestDataDir() { return TPSERVE_TEST_DATA_DIR; }
std::string BuiltInAssetsDir() { return TPSERVE_TEST_ASSETS_DIR; }

}  // namespace tpserve::testing
