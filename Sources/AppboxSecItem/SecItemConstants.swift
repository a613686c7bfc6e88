// AppboxSecItem owns the in-app side of the keychain: the wire protocol between a confined
// app and the keychain broker of its supervising `appbox run`/`launch` (framing, limits, the
// platform's key names and statuses) and a SecItem-like client for Swift apps. It depends on
// AppboxCore (the property-list codec) and CSystem (descriptor passing) only: an app needs
// nothing of appbox's keychain, container or backup code.

import AppboxCore

/// The platform's status type.
public typealias OSStatus = Int32

// MARK: Statuses (the platform's values)

public let errSecSuccess: OSStatus = 0
/// The broker could not be reached, or hung up.
public let errSecIO: OSStatus = -36
/// A malformed request: an unknown key, a value of the wrong type, a missing attribute.
/// The app's keychain quota (items or bytes) is used up.
public let errSecDiskFull: OSStatus = -34
public let errSecParam: OSStatus = -50
/// A reply beyond the size limit.
public let errSecAllocate: OSStatus = -108
/// The broker failed; its message says why.
public let errSecInternalComponent: OSStatus = -2070
/// No broker: the process does not run inside appbox.
public let errSecNotAvailable: OSStatus = -25291
/// when-passcode-set items need a device passcode.
public let errSecAuthFailed: OSStatus = -25293
public let errSecDuplicateItem: OSStatus = -25299
public let errSecItemNotFound: OSStatus = -25300
/// The device is locked.
public let errSecInteractionNotAllowed: OSStatus = -25308
/// The keychain is corrupt or was tampered with.
public let errSecDecode: OSStatus = -26275
/// An access group the app is not entitled to.
public let errSecMissingEntitlement: OSStatus = -34018

/// The platform's name of `status` ("errSecItemNotFound"), or nil for a status it does not use.
public func SecItemStatusName(_ status: OSStatus) -> String? {
  switch status {
  case errSecSuccess: return "errSecSuccess"
  case errSecIO: return "errSecIO"
  case errSecDiskFull: return "errSecDiskFull"
  case errSecParam: return "errSecParam"
  case errSecAllocate: return "errSecAllocate"
  case errSecInternalComponent: return "errSecInternalComponent"
  case errSecNotAvailable: return "errSecNotAvailable"
  case errSecAuthFailed: return "errSecAuthFailed"
  case errSecDuplicateItem: return "errSecDuplicateItem"
  case errSecItemNotFound: return "errSecItemNotFound"
  case errSecInteractionNotAllowed: return "errSecInteractionNotAllowed"
  case errSecDecode: return "errSecDecode"
  case errSecMissingEntitlement: return "errSecMissingEntitlement"
  default: return nil
  }
}

/// A sentence for `status`, as the platform's `SecCopyErrorMessageString` gives one.
public func SecCopyErrorMessageString(_ status: OSStatus, _ reserved: UnsafeMutableRawPointer?) -> String? {
  switch status {
  case errSecSuccess: return "No error."
  case errSecIO: return "I/O error: the keychain broker could not be reached."
  case errSecDiskFull: return "The disk is full (the app's keychain quota is used up)."
  case errSecParam: return "One or more parameters passed to a function were not valid."
  case errSecAllocate: return "Failed to allocate memory: the reply is larger than the protocol allows."
  case errSecInternalComponent: return "An internal component failed."
  case errSecNotAvailable: return "No keychain is available: the process does not run inside appbox."
  case errSecAuthFailed: return "The user name or passphrase you entered is not correct (no device passcode)."
  case errSecDuplicateItem: return "The specified item already exists in the keychain."
  case errSecItemNotFound: return "The specified item could not be found in the keychain."
  case errSecInteractionNotAllowed: return "User interaction is not allowed (the device is locked)."
  case errSecDecode: return "Unable to decode the provided data."
  case errSecMissingEntitlement: return "A required entitlement isn't present."
  default: return nil
  }
}

// MARK: Keys and values (the platform's strings)

public let kSecClass = "class"
public let kSecClassGenericPassword = "genp"
public let kSecClassInternetPassword = "inet"
public let kSecAttrService = "svce"
public let kSecAttrAccount = "acct"
public let kSecAttrAccessGroup = "agrp"
public let kSecAttrLabel = "labl"
public let kSecAttrComment = "icmt"
public let kSecAttrCreationDate = "cdat"
public let kSecAttrModificationDate = "mdat"
public let kSecAttrAccessible = "pdmn"
public let kSecAttrAccessibleWhenUnlocked = "ak"
public let kSecAttrAccessibleAfterFirstUnlock = "ck"
public let kSecAttrAccessibleWhenPasscodeSetThisDeviceOnly = "akpu"
public let kSecAttrAccessibleWhenUnlockedThisDeviceOnly = "aku"
public let kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly = "cku"
public let kSecValueData = "v_Data"
public let kSecReturnData = "r_Data"
public let kSecReturnAttributes = "r_Attributes"
public let kSecMatchLimit = "m_Limit"
public let kSecMatchLimitOne = "m_LimitOne"
public let kSecMatchLimitAll = "m_LimitAll"
