/** Every TypeORM entity, registered on the DataSource. */
import { ActivityEntity } from "./activity.entity.js";
import { ApiKeyEntity } from "./api-key.entity.js";
import { CreditLeaseEntity } from "./credit-lease.entity.js";
import { CustomModelEntity } from "./custom-model.entity.js";
import { DeploymentEntity } from "./deployment.entity.js";
import { InvitationEntity } from "./invitation.entity.js";
import { LedgerEntryEntity } from "./ledger-entry.entity.js";
import { OAuthIdentityEntity } from "./oauth-identity.entity.js";
import { ResponseEntity } from "./response.entity.js";
import { TeamEntity } from "./team.entity.js";
import { TeamMemberEntity } from "./team-member.entity.js";
import { UserEntity } from "./user.entity.js";

export {
  ActivityEntity,
  ApiKeyEntity,
  CreditLeaseEntity,
  CustomModelEntity,
  DeploymentEntity,
  InvitationEntity,
  LedgerEntryEntity,
  OAuthIdentityEntity,
  ResponseEntity,
  TeamEntity,
  TeamMemberEntity,
  UserEntity,
};
export const entities = [
  TeamEntity,
  UserEntity,
  ApiKeyEntity,
  LedgerEntryEntity,
  ActivityEntity,
  ResponseEntity,
  CreditLeaseEntity,
  OAuthIdentityEntity,
  InvitationEntity,
  TeamMemberEntity,
  CustomModelEntity,
  DeploymentEntity,
];
